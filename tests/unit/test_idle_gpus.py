"""Issue 30 item 5: where every point leaves GPUs idle, the plan also offers one that uses
them for quality (less quantization) and no sleepers, and shows each point's quality cost.

The cluster of the issue (tests/data/idle3): 2x A100-80GB, 4x RTX-4090, 2x L40S and five of
lab16's models; before, every written point ran all five quantized on the two A100s."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from planner.cli.main import main
from planner.schemas import load_cluster, load_models, load_plan

ROOT = Path(__file__).resolve().parents[2]
DATA = "tests/data/idle3"
IDLE_POINT = "max-quality"  # optimizer.idle.IDLE_POINT


@pytest.fixture(scope="module")
def idle_plan(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "idle3.plan.yaml"
    cwd = os.getcwd()
    os.chdir(ROOT)
    argv = ["optimize", "-c", f"{DATA}/cluster.yaml", "-m", f"{DATA}/models.yaml"]
    argv += ["-s", f"{DATA}/slo.yaml", "-w", f"{DATA}/workload.yaml", "--evals", "8"]
    try:
        with pytest.raises(SystemExit) as e:
            main([*argv, "--jobs", "2", "--json", "-o", str(out)])
        assert e.value.code == 0
    finally:
        os.chdir(cwd)
    return out


def test_idle_gpus_buy_quality(idle_plan):
    plan = load_plan(idle_plan)
    ms = load_models(ROOT / DATA / "models.yaml")
    n_gpus = sum(g.count for n in load_cluster(ROOT / DATA / "cluster.yaml").nodes for g in n.gpus)
    pts = {p.name: p for p in plan.points}
    assert IDLE_POINT in pts, sorted(pts)
    roomy = pts[IDLE_POINT]
    others = [p for p in plan.points if p.name != IDLE_POINT]
    assert all(p.predicted.gpus_used < n_gpus for p in others)
    # less quantization than every other point, the cost recorded in the plan
    assert all(roomy.predicted.quality_cost < p.predicted.quality_cost for p in others)
    assert all(p.predicted.quality_cost > 0 for p in others)  # they run AWQ/fp8/GPTQ

    def penalties(p) -> float:
        return sum(ms.model(i.model).variant(i.variant).quality_penalty for i in p.instances)

    assert penalties(roomy) < min(penalties(p) for p in others)
    # no sleepers: every model stays awake, no switches
    assert all(i.tier == "gpu" for i in roomy.instances)
    assert roomy.predicted.switch_p95_s == 0
    assert roomy.predicted.slo_attainment >= min(p.predicted.slo_attainment for p in others)
    assert plan.selected != IDLE_POINT  # offered beside the front, not chosen for the user
