"""One optimize pipeline (issue 41 item 4): the plan records the whole OptimizeConfig and a
re-optimization rebuilds it from the plan (held-back rule, quality weight, solver limits),
searching as `planner optimize` does (no scorer: the config's held-back days)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from planner.app import files as cin
from planner.app.inputs import resolve
from planner.app.plans import config_from_plan
from planner.app.reoptimize import Reoptimizer
from planner.cli.main import main
from planner.schemas import load_plan

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "small"
# every setting away from its default, so that a dropped one shows
FLAGS = [
    "--evals",
    "3",
    "--seed",
    "2",
    "--held-back",
    "last",
    "--validate-days",
    "1",
    "--quality-weight",
    "3",
    "--milp-nodes",
    "700",
    "--time-limit",
    "40",
    "--no-baselines",
]


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pipe") / "small.plan.yaml"
    args = ["optimize"]
    for flag in ("cluster", "models", "slo", "workload"):
        args += [f"--{flag}", str(SMALL / f"{flag}.yaml")]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with pytest.raises(SystemExit) as e:
            main([*args, *FLAGS, "--jobs", "1", "--json", "-o", str(out)])
        assert e.value.code == 0
    finally:
        os.chdir(cwd)
    return out


def test_plan_records_the_whole_config(plan_path):
    cfg = load_plan(plan_path).search["config"]
    assert cfg["held_back"] == "last" and cfg["validate_days"] == 1
    assert cfg["quality_weight"] == 3.0 and cfg["baselines"] is False
    assert cfg["milp_max_nodes"] == 700 and cfg["milp_time_limit_s"] == 40.0
    assert config_from_plan(load_plan(plan_path)).model_dump(mode="json") == cfg


def test_reoptimization_rebuilds_the_config_from_the_plan(plan_path, tmp_path):
    """The re-optimized plan records the plan's config, the evaluations aside."""
    inp = resolve(plan_path, need_slo=True)
    trace = cin.workload(SMALL / "workload.yaml", inp.models, inp.seed())
    out = tmp_path / "re.plan.yaml"
    Reoptimizer(inp, 2).write(trace, out, SMALL / "workload.yaml")
    old, new = load_plan(plan_path).search, load_plan(out).search
    assert new["config"] == {**old["config"], "evals": 2}
    # the held-back day of the config is held back again (no scorer replaces it)
    assert new["validate_days"] == 1 and new["held_back"] == "last"
    assert new["held_requests"] > 0
