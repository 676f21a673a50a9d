"""`pin:` in the models file: the MILP places a pinned model only on its node / GPU type."""

from __future__ import annotations

import pytest
from optimizer_builders import model_demand

from planner.errors import InputError
from planner.optimizer.candidates import Knobs, enumerate_candidates, gpu_groups, gpu_sets
from planner.optimizer.milp import MilpInput, solve
from planner.schemas import check_pins, parse

CLUSTER = parse(
    {
        "kind": "cluster",
        "name": "two",
        "nodes": [
            {"name": "n0", "cpu_memory_gib": 128, "gpus": [{"type": "L40S", "count": 2}]},
            {"name": "n1", "cpu_memory_gib": 128, "gpus": [{"type": "RTX-4090", "count": 2}]},
        ],
    },
    "cluster",
)


def _models(pin: dict | None):
    entry = {
        "name": "m",
        "architecture": "Qwen2.5-7B-Instruct",
        "max_context": 8192,
        "variants": [{"name": "bf16", "quantization": "bf16"}],
    }
    if pin is not None:
        entry["pin"] = pin
    return parse({"kind": "models", "models": [entry]}, "models")


def _placed(pin: dict | None) -> set[tuple[str, str]]:
    models = _models(pin)
    knobs = Knobs()
    slo = parse({"kind": "slo", "default": {"tpot_p95_s": 0.2}}, "slo")
    demand = model_demand(["m"], [0.5])
    cands = enumerate_candidates(
        CLUSTER, models, slo, demand, knobs, max_tp=2, max_model_len_cap=None, gpu_margin=0.06
    )
    sets = tuple(s for tp in (1, 2) for s in gpu_sets(CLUSTER, tp))
    inp = MilpInput(
        candidates=tuple(cands),
        sets=sets,
        demand=demand,
        models=("m",),
        gpu_usable_gib={
            (n.name, d): g.spec.memory_gib * 0.94 for n in CLUSTER.nodes for d, g in n.gpu_list()
        },
        gpu_groups=gpu_groups(CLUSTER),
        node_ram_gib={"n0": 128, "n1": 128},
        headroom=knobs.headroom,
        max_replicas=2,
        may_sleep=knobs.may_sleep,
        w_switch=knobs.w_switch,
        w_memory=knobs.w_memory,
        w_quality=knobs.w_quality,
        w_gpus=knobs.w_gpus,
        pins={m.name: (m.pin.node, m.pin.gpu_type) for m in models.models if m.pin},
    )
    res = solve(inp, time_limit_s=60)
    assert res.status == "optimal"
    return {(p.gset.node, p.gset.gpu_type) for p in res.placements}


def test_a_pinned_model_is_placed_only_where_its_pin_allows():
    free = _placed(None)
    assert free  # placed somewhere
    # pin it away from where it went without a pin: the MILP follows the pin
    other = "n1" if ("n0", "L40S") in free else "n0"
    assert {n for n, _ in _placed({"node": other})} == {other}
    assert {t for _, t in _placed({"gpu_type": "RTX-4090"})} == {"RTX-4090"}
    assert _placed({"node": "n0", "gpu_type": "L40S"}) == {("n0", "L40S")}


@pytest.mark.parametrize(
    ("pin", "needle"),
    [
        ({"node": "n9"}, "node 'n9', which is not in the cluster"),
        ({"node": "n0", "gpu_type": "RTX-4090"}, "node 'n0' does not have"),
        ({"gpu_type": "A100-80G"}, "the cluster does not have"),
    ],
)
def test_a_pin_the_cluster_cannot_honour_is_an_input_error(pin, needle):
    with pytest.raises(InputError) as e:
        check_pins(_models(pin), CLUSTER, file="models.yaml")
    assert needle in str(e.value) and "pin" in str(e.value)


def test_an_empty_pin_is_refused():
    with pytest.raises(InputError) as e:
        _models({})
    assert "a pin names a node, a gpu_type, or both" in str(e.value)
