"""The nightly re-plan (issue 41 item 5): `adjust --replan` optimizes again on the last day
of the request log through the one pipeline, with the plan's config, and writes the plan
over the old one (kept as .prev.yaml) with the point in force in its front and selected, so
the morning needs no restart; `--print-cron` carries the nightly line."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml
from adjust_helpers import write_log
from cli_helpers import run_cli

from planner.adjuster.state import StateStore
from planner.app import files as cin
from planner.cli.main import main
from planner.io import sha256_file
from planner.schemas import load_models, load_plan

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "small"


def test_replan_keeps_the_point_in_force_and_the_config(tmp_path, capsys):
    for f in ("cluster", "models", "slo", "workload"):
        shutil.copy(SMALL / f"{f}.yaml", tmp_path / f"{f}.yaml")
    doc = yaml.safe_load((ROOT / "tests" / "golden" / "plan_small.yaml").read_text())
    for k, ref in doc["inputs"].items():
        ref["path"] = f"{k}.yaml"
    doc["search"]["config"]["evals"] = 2  # a short search: the test is about what is kept
    plan_file = tmp_path / "small.plan.yaml"
    plan_file.write_text(yaml.safe_dump(doc))
    old = load_plan(plan_file)
    force = next(p.name for p in old.points if p.name != old.selected)  # not the selected one
    state = tmp_path / "state"
    state.mkdir()
    trace = cin.workload(SMALL / "workload.yaml", load_models(SMALL / "models.yaml"), 0)
    day = trace[trace["timestamp"] < 86400.0]
    write_log(state, day, time.time() - 86400.0)  # the last day of the log
    with StateStore(state) as st:
        st.set_meta(plan_sha=sha256_file(plan_file), point=force)
    with pytest.raises(SystemExit) as e:
        main(["adjust", "--plan", str(plan_file), "--state-dir", str(state), "--replan", "--json"])
    assert e.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["in_force"] == force and out["requests"] == len(day)
    new = load_plan(plan_file)
    kept = next(p for p in new.points if p.instances == old.point(force).instances)
    assert new.selected == kept.name  # the morning starts nothing
    assert new.search["config"] == {**old.search["config"]}  # the plan's own config
    assert load_plan(out["previous"]).points == old.points


def test_print_cron_has_the_nightly_replan(tmp_path, capsys):
    argv = ["adjust", "--plan", tmp_path / "p.yaml", "--state-dir", tmp_path, "--print-cron"]
    code, out, _ = run_cli(argv, capsys)
    assert code == 0
    lines = out.splitlines()
    assert any(x.startswith("30 2 * * * ") and "--replan" in x for x in lines)
