"""`planner evaluate` end to end on the lab16 example with a small synthetic trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import METRIC_KEYS, run_cli

from planner.io import dump_yaml
from planner.optimizer import baselines
from planner.optimizer.workload.synth import synth
from planner.optimizer.workload.synth_spec import bind_models, default_spec
from planner.schemas import load_cluster, load_models, load_slo
from planner.schemas.plan import InputRef, Plan
from planner.trace.write import write_trace

LAB = Path(__file__).resolve().parents[2] / "plans" / "examples" / "lab16"
KEYS = METRIC_KEYS | {"variant_quality_cost", "per_model"}  # a point's figures, not a replay's


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("eval")
    models = load_models(LAB / "models.yaml")
    spec, _ = bind_models(
        default_spec().model_copy(update={"users": 3, "days": 1, "stationary": True}), models.names
    )
    df = synth(spec, seed=1)
    write_trace(df, d / "trace.csv")
    b = baselines.static(load_cluster(LAB / "cluster.yaml"), models)
    plan = Plan(
        selected="static",
        points=[b.point, b.point.model_copy(update={"name": "copy"})],
        inputs={k: InputRef(path=str(LAB / f"{k}.yaml")) for k in ("cluster", "models", "slo")},
    )
    (d / "plan.yaml").write_text(dump_yaml(plan.model_dump(mode="json")))
    return {"dir": d, "trace": d / "trace.csv", "plan": d / "plan.yaml", "n": len(df)}


def evaluate(inputs, capsys, *args) -> tuple[int, str]:
    """`planner evaluate ARGS --workload <the synthetic trace>`: exit code and stdout."""
    code, out, _ = run_cli(["evaluate", *args, "--workload", inputs["trace"]], capsys)
    return code, out


def test_plan_all_points_json(inputs, capsys):
    code, out = evaluate(inputs, capsys, inputs["plan"], "--all-points", "--json")
    assert code == 0
    pts = json.loads(out)["points"]
    assert list(pts) == ["static", "copy"]
    assert set(pts["static"]) == KEYS
    assert pts["static"]["requests"] == inputs["n"]
    assert pts["static"] == pts["copy"]  # same placement, same numbers


@pytest.mark.parametrize("name", ["static", "lru", "melange"])
def test_baseline_without_plan(inputs, capsys, name):
    lab = [a for k in ("cluster", "models", "slo") for a in (f"--{k}", LAB / f"{k}.yaml")]
    code, out = evaluate(inputs, capsys, "--baseline", name, *lab, "--json")
    assert code == 0
    m = json.loads(out)["points"][name]
    assert m["requests"] == inputs["n"] and 0 <= m["slo_attainment"] <= 1 and m["gpus_used"] >= 1


def test_baseline_needs_inputs(inputs, capsys):
    code, _ = evaluate(inputs, capsys, "--baseline", "static")
    assert code == 2


def test_table_and_plot(inputs, capsys):
    png = inputs["dir"] / "eval.png"
    code, out = evaluate(inputs, capsys, inputs["plan"], "--baseline", "lru", "--plot", png)
    assert code == 0 and "static" in out and "lru" in out
    assert png.stat().st_size > 1000


def test_baselines_are_valid_points_for_the_inputs():
    cluster = load_cluster(LAB / "cluster.yaml")
    models = load_models(LAB / "models.yaml")
    slo = load_slo(LAB / "slo.yaml")
    from planner.optimizer.invariants import check_plan

    for b in (baselines.static(cluster, models), baselines.lru(cluster, models)):
        check_plan(Plan(selected=b.point.name, points=[b.point]), cluster, models)
        assert {i.model for i in b.point.instances} == set(models.names)
    s = baselines.static(cluster, models).point
    assert all(i.tier == "gpu" for i in s.instances)
    gpus = [(i.node, g) for i in s.instances for g in i.gpus]
    assert len(gpus) == len(set(gpus))  # static never shares a GPU
    assert all(i.tier == "host" for i in baselines.lru(cluster, models).point.instances)
    _ = slo
