"""`planner adjust` live: `live.tick` on the gateway's request log, the journal, the lease, apply.

The request log here is a real SQLite file written by the gateway's own `RequestLog`, with
epoch timestamps as the gateway writes them.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time

import adjust_helpers as h
import pytest
from adjust_helpers import EPOCH0, write_log
from apply_fakes import FakeBackend

from planner.adjuster.decisions import DecisionLog
from planner.adjuster.gateway import RequestLogSource
from planner.adjuster.live import TickConfig, tick, window_at
from planner.adjuster.policy import AdjustConfig, AdjustState
from planner.adjuster.replay import replay
from planner.adjuster.state import StateStore
from planner.cli.main import main

DAY = 86400.0


def test_live_tick_on_the_gateway_log_forecasts_and_decides_as_replay(tmp_path):
    """A planner-only day, then two days with coder-32b too (the third foreseen by the
    second), in the gateway's SQLite log with epoch timestamps: every hourly tick sees the
    same window, the same forecast counts and takes the same decision as the replay of the
    same requests (trace seconds)."""
    tr, p = h.adoption_plan(days=3)
    perfs, slo = h.perfs(p), h.slo()
    cfg = AdjustConfig(min_dwell_s=3600.0)
    out = replay(p, tr, slo, perfs, cfg)
    state = tmp_path / "state"
    write_log(state, tr, EPOCH0)
    src = RequestLogSource(state)
    assert len(window_at(src, EPOCH0 + DAY + 10 * 3600, 3600)) == len(h.window(tr, DAY + 9 * 3600))
    tcfg = TickConfig(
        policy=cfg,
        slo=slo,
        perfs=perfs,
        plan_sha="live",
        start=AdjustState(point=p.selected, since_s=EPOCH0, config=cfg),
        model_names=[h.A, h.B],
    )
    be = FakeBackend(supports_sleep=True)
    live = []
    with StateStore(state) as store:
        for d in out["decisions"]:
            res = tick(EPOCH0 + d["at_s"], src, be, store, p, tcfg)
            live.append(
                {
                    "at_s": res.now_s - EPOCH0,
                    "kind": res.action.kind,
                    "from": res.action.from_point,
                    "point": res.action.point,
                    "requests": len(res.window),
                    "forecast_window_requests": list(res.forecast_requests),
                    "reason": res.action.reason,
                }
            )
    tracked = [d for d in out["decisions"] if any(d["forecast_window_requests"])]
    assert tracked, "the replay never looked ahead: the test proves nothing"
    assert any(d["kind"] == "hop" for d in out["decisions"])
    assert live == out["decisions"]


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A shared/split plan made on a planner-only day, and a log of a day-1 hour with coder-32b,
    logged in the last hour before a fixed clock's now (the decision reads the hour of day:
    on the real clock the test failed when run between 12:00 and 13:00 UTC)."""
    tr, p = h.adoption_plan()
    plan_file = h.write_inputs(tmp_path, p)
    state = tmp_path / "state"
    state.mkdir()
    start = DAY + 14 * 3600.0  # shared thrashes in this hour
    now = EPOCH0 + 3 * DAY + start + 3600.0  # the same hour of day, days later
    monkeypatch.setattr(time, "time", lambda: now)
    n = write_log(state, h.window(tr, start), now - 3600.0 - start)
    return plan_file, state, n


def _dry_run_once(plan_file, state) -> list:
    """`planner adjust --once --dry-run --json` that hops as soon as a point wins a window."""
    return [
        "adjust",
        "--plan",
        plan_file,
        "--state-dir",
        str(state),
        "--once",
        "--dry-run",
        "--min-dwell",
        "0",
        "--confirm",
        "1",
        "--json",
    ]


def _run(argv, capsys) -> tuple[int, dict | str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr().out
    try:
        return e.value.code, json.loads(out)
    except json.JSONDecodeError:
        return e.value.code, out


def test_dry_run_decides_and_journals_without_applying(setup, capsys):
    plan_file, state, n = setup
    code, out = _run(_dry_run_once(plan_file, state), capsys)
    assert code == 0, out
    assert out["window"]["requests"] == n
    d = out["decision"]
    assert d["kind"] == "hop" and d["from"] == "shared" and d["point"] == "split"
    assert set(d["reasons"]["points"]) == {"shared", "split"}
    assert d["reasons"]["drift_plan"]["verdict"] == "drift"
    assert out["apply"] is None and out["hop"] is None
    with DecisionLog(state) as log:
        rows = log.entries()
        assert [r["action"] for r in rows] == ["hop"] and rows[0]["dry_run"] == 1
        assert log.last_state("x") is None  # a dry run is not a state to continue from


def test_tick_applies_the_hop_then_holds_in_the_dwell(setup):
    """`tick` with the fake backend: the hop is applied, journaled, and the next tick
    continues from the journaled state (no CLI monkeypatching needed)."""
    from planner.app import adjust_inputs

    plan_file, state, _ = setup
    inp = adjust_inputs.load(plan_file, None, None, None)
    be = FakeBackend(supports_sleep=True)
    cfg = AdjustConfig(min_dwell_s=0, confirm_windows=1)
    with StateStore(state) as store:
        tcfg = adjust_inputs.tick_config(inp, cfg, state_dir=state, dry_run=False, timeout_s=5)
        res = tick(time.time(), RequestLogSource(state), be, store, inp.plan, tcfg)
        assert res.action.kind == "hop" and res.apply is not None and res.apply.ok
        assert res.hop is not None and res.hop.starts >= 1
        assert {a.instance for a in res.apply.actions} >= {"planner-7b-0", "coder-32b-0"}
        assert store.meta()["point"] == "split"
        assert any(j["action"] == "adjust" for j in store.journal_entries())
        tcfg.policy = AdjustConfig(min_dwell_s=7200.0)
        res = tick(time.time(), RequestLogSource(state), be, store, inp.plan, tcfg)
    assert res.action.kind == "hold" and res.state_before.point == "split"
    assert res.state_before.hop_times_s  # the journaled state of the first tick


def test_lease_held_exits_3(setup, capsys, monkeypatch):
    plan_file, state, _ = setup
    monkeypatch.undo()  # the lease is judged on the real clock (the log is not read)
    with StateStore(state) as st:
        pass
    db = sqlite3.connect(state / "state.sqlite")
    now = time.time()
    db.execute(
        "INSERT INTO lease (id, holder_pid, holder_host, purpose, acquired_at, expires_at)"
        " VALUES (1, ?, ?, 'apply', ?, ?)",
        (os.getppid(), st.host, now, now + 600),
    )
    db.commit()
    db.close()
    with pytest.raises(SystemExit) as e:
        main(["adjust", "--plan", plan_file, "--state-dir", str(state), "--once"])
    assert e.value.code == 3
    assert "apply" in capsys.readouterr().err


def test_live_adjust_without_vllm_names_the_extra_before_deciding(setup, capsys, monkeypatch):
    """Issue 15: live `adjust` may start vLLM on a hop; without it, exit 2 with the pip line
    before anything is decided or journaled. A dry run starts nothing and needs no engine."""
    import sys

    plan_file, state, _ = setup
    # Stand-in for a base install: Python's own marker of a module that cannot be imported.
    monkeypatch.setitem(sys.modules, "vllm", None)
    argv = ["adjust", "--plan", plan_file, "--state-dir", str(state), "--once"]
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "needs vllm" in err and re.search(r"pip install 'planner\[serve(-cpu)?\]'", err)
    assert not (state / "state.sqlite").exists()  # nothing decided, nothing journaled
    code, out = _run([*argv, "--dry-run", "--json"], capsys)
    assert code == 0 and out["decision"]["kind"] in ("hop", "hold")


def test_adjust_errors_keep_their_brackets(capsys):
    """Issue 15: error text is not read as rich markup (`planner[serve]`, `nodes[1]`)."""
    from planner.cli.common import print_error

    print_error("needs vllm: pip install 'planner[serve]' (nodes[1])")
    assert "pip install 'planner[serve]' (nodes[1])" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["adjust", "--plan", "p.yaml", "--every", "[1h]"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "not a duration: '[1h]'" in err and "Traceback" not in err


@pytest.mark.parametrize("kind", ["dir", "text"])
def test_adjust_once_refuses_a_request_log_that_is_not_a_database(setup, capsys, kind):
    """Issue 43: `adjust --once` exited 0 when requests.sqlite was a directory."""
    plan_file, state, _ = setup
    log = state / "requests.sqlite"
    log.unlink()
    if kind == "dir":
        log.mkdir()
    else:
        log.write_text("not a database\n" * 100)
    with pytest.raises(SystemExit) as e:
        main(["adjust", "--plan", plan_file, "--state-dir", str(state), "--once"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "requests.sqlite" in err and "Traceback" not in err, err


def _apply_other_plan(plan_file: str, tmp_path) -> str:
    """`planner apply other/plan.yaml --point split` on the state dir, recorded as the CLI
    records it (the fake backend stands in for the servers); that plan's path."""
    from pathlib import Path

    from planner.adjuster.apply import apply_point
    from planner.app import adjust_inputs
    from planner.io import sha256_file

    plan = adjust_inputs.load(plan_file, None, None, None).plan
    (tmp_path / "other").mkdir()
    other = h.write_inputs(tmp_path / "other", plan.model_copy(update={"selected": "split"}))
    inp = adjust_inputs.load(other, None, None, None)
    state = tmp_path / "state"
    tcfg = adjust_inputs.tick_config(
        inp, AdjustConfig(), state_dir=state, dry_run=False, timeout_s=5
    )
    with StateStore(state) as store:
        out = apply_point(
            inp.plan,
            "split",
            backend=FakeBackend(supports_sleep=True),
            state=store,
            plan_sha=sha256_file(other),
            timeout_s=5,
            model_path_resolver=tcfg.model_path_resolver,
        )
        assert out.ok
        store.set_meta(plan_path=str(Path(other).resolve()))
    return str(Path(other).resolve())


def test_a_tick_of_another_plan_than_the_one_in_force_hops_nothing(setup, tmp_path):
    """Issue 42: `apply other.yaml` after adjust started: a tick of the old plan would hop
    its points over that apply. It refuses, naming both plans and the fix."""
    from pathlib import Path

    from planner.app import adjust_inputs
    from planner.errors import ApplyError

    plan_file, state, _ = setup
    other = _apply_other_plan(plan_file, tmp_path)
    inp = adjust_inputs.load(plan_file, None, None, None)
    be = FakeBackend(supports_sleep=True)
    cfg = AdjustConfig(min_dwell_s=0, confirm_windows=1)
    with StateStore(state) as store:
        before = ({r.id for r in store.instances()}, store.meta()["point"])
        tcfg = adjust_inputs.tick_config(inp, cfg, state_dir=state, dry_run=False, timeout_s=5)
        with pytest.raises(ApplyError) as e:
            tick(time.time(), RequestLogSource(state), be, store, inp.plan, tcfg)
        assert ({r.id for r in store.instances()}, store.meta()["point"]) == before
    assert other in str(e.value) and str(Path(plan_file).resolve()) in str(e.value)
    assert f"--plan {other}" in e.value.fix
    with DecisionLog(state) as log:
        assert log.entries() == []  # nothing decided on the old plan


def test_adjust_follows_the_point_in_force_of_another_plan(setup, tmp_path, capsys):
    """The CLI acts on the plan in force, says so, and decides from its point; with that
    plan's file gone it refuses, naming both files."""
    from pathlib import Path

    plan_file, state, _ = setup
    other = _apply_other_plan(plan_file, tmp_path)
    argv = _dry_run_once(plan_file, state)
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    assert e.value.code == 0, err
    note = f"plan changed: following the point in force of {other}"
    assert note in err and note in json.loads(out)["plan_changed"]
    assert json.loads(out)["decision"]["from"] == "split"  # the other plan's point in force
    with StateStore(state) as store:
        assert any(j["result"] == "plan changed" for j in store.journal_entries())
    Path(other).unlink()
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and other in err and str(Path(plan_file).resolve()) in err
