"""The typed figures of a simulated point (`optimizer/point_metrics.py`): the same numbers as
the JSON `planner evaluate --json` prints, key for key, and read back unchanged."""

from __future__ import annotations

import json

from optimizer_builders import perf, point, step_model, trace

from planner.optimizer.point_metrics import ModelMetrics, PointMetrics, metrics_json
from planner.optimizer.sim.simulator import simulate
from planner.schemas.slo import Slo

POINT_KEYS = [
    "slo_attainment",
    "ttft_p95_s",
    "tpot_p95_s",
    "switch_p95_s",
    "switch_count",
    "warm_gpu_gib",
    "gpus_used",
    "requests",
    "refused",
    "substituted_share",
    "quality_cost",
    "variant_quality_cost",
    "per_model",
]
MODEL_KEYS = [
    "requests",
    "failed",
    "refused",
    "slo_attainment",
    "ttft_p95_s",
    "tpot_p95_s",
    "switch_p95_s",
    "switch_count",
    "substituted_share",
    "quality_cost",
    "variant_quality_cost",
]


def _sim():
    p = point(["gpu", "host"], gpus=[[0], [1]])
    perfs = {i.id: perf(step_model(dense_weight_read_s=0.01)) for i in p.instances}
    tr = trace([10, 20, 30, 400, 410], ["m0", "m1", "m0", "m1", "m0"], 100, 5)
    return simulate(p, perfs, tr, Slo())


def test_typed_figures_are_the_json_ones_key_for_key():
    r = _sim()
    m = r.point_metrics()
    assert isinstance(m.per_model["m1"], ModelMetrics)
    assert m.switch_count == r.wakes and m.warm_gpu_gib == r.warm_gpu_gib
    out = r.to_metrics()
    assert list(out) == POINT_KEYS
    assert all(list(pm) == MODEL_KEYS for pm in out["per_model"].values())
    assert out == m.to_json()
    json.dumps(out)  # plain data only


def test_json_reads_back_and_a_missing_figure_is_its_default():
    m = _sim().point_metrics()
    assert PointMetrics.from_json(m.to_json()) == m
    part = PointMetrics.from_json({"slo_attainment": 0.9, "switch_p95_s": 2.0, "other": 1})
    assert (part.slo_attainment, part.switch_p95_s, part.quality_cost, part.per_model) == (
        0.9,
        2.0,
        0.0,
        {},
    )
    assert metrics_json({"static": "cannot be built", "p": part}) == {
        "static": {"error": "cannot be built"},
        "p": part.to_json(),
    }
