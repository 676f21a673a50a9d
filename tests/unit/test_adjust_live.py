"""`planner adjust --once` against a state dir: the gateway's log, the journal, the lease, apply."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import adjust_helpers as h
import pytest

from planner.adjuster.decisions import DecisionLog, read_window
from planner.adjuster.gateway import LOG_COLUMNS, RequestLog
from planner.cli.main import main

DAY = 86400.0


def _log_window(state_dir, df, start_s: float, now: float) -> int:
    """The trace rows of [start_s, start_s + 1 h) as the gateway's log of the last hour."""
    win = h.window(df, start_s)
    log = RequestLog(state_dir / "requests.sqlite")
    for r in win.itertuples():
        t = now - 3600.0 + (r.timestamp - start_s)
        row = dict(timestamp=t, user=r.user, session=r.session, model=r.model,
                   input_tokens=r.input_tokens, output_tokens=r.output_tokens,
                   cached_tokens=r.cached_tokens, ttft_s=0.1, latency_s=1.0, switch_wait_s=0.0,
                   status=200, instance=f"{r.model}-0")  # fmt: skip
        log.add(tuple(row[c] for c in LOG_COLUMNS))
    log.close()
    return len(win)


@pytest.fixture
def setup(tmp_path):
    """A shared/split plan made on a planner-only day, and a log of a day-1 hour with coder-32b."""
    tr = h.adoption_trace(days=2, adoption_day=1)
    p = h.shared_split_plan(h.reference(tr[tr["timestamp"] < DAY]))
    plan_file = h.write_inputs(tmp_path, p)
    state = tmp_path / "state"
    state.mkdir()
    n = _log_window(state, tr, DAY + 14 * 3600.0, time.time())  # shared thrashes
    return plan_file, state, n


def _run(argv, capsys) -> tuple[int, dict | str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr().out
    try:
        return e.value.code, json.loads(out)
    except json.JSONDecodeError:
        return e.value.code, out


def test_read_window_keeps_the_hour_of_day(setup):
    _, state, n = setup
    now = time.time()
    win = read_window(state, now, 3600.0)
    assert len(win) == n
    assert win["timestamp"].between(0, 2 * DAY).all()
    assert len(read_window(state, now - 7200.0, 3600.0)) == 0


def test_dry_run_decides_and_journals_without_applying(setup, capsys):
    plan_file, state, n = setup
    code, out = _run(["adjust", "--plan", plan_file, "--state-dir", str(state), "--once",
                      "--dry-run", "--min-dwell", "0", "--confirm", "1", "--json"], capsys)  # fmt: skip
    assert code == 0, out
    assert out["window"]["requests"] == n
    d = out["decision"]
    assert d["kind"] == "hop" and d["from"] == "shared" and d["point"] == "split"
    assert set(d["reasons"]["points"]) == {"shared", "split"}
    assert d["reasons"]["drift_plan"]["verdict"] == "drift"
    assert out["apply"] is None
    with DecisionLog(state) as log:
        rows = log.entries()
        assert [r["action"] for r in rows] == ["hop"] and rows[0]["dry_run"] == 1
        assert log.last_state("x") is None  # a dry run is not a state to continue from


def test_once_applies_the_hop_then_holds_in_the_dwell(setup, capsys, monkeypatch):
    from test_apply_fake import FakeBackend

    import planner.cli.apply as cli_apply

    be = FakeBackend(supports_sleep=True)
    monkeypatch.setattr(cli_apply, "make_backend", lambda *a, **k: be)
    plan_file, state, _ = setup
    argv = ["adjust", "--plan", plan_file, "--state-dir", str(state), "--once", "--json"]
    code, out = _run([*argv, "--min-dwell", "0", "--confirm", "1"], capsys)
    assert code == 0, out
    assert out["decision"]["kind"] == "hop" and out["apply"]["point"] == "split"
    assert {a["instance"] for a in out["apply"]["actions"]} >= {"planner-7b-0", "coder-32b-0"}
    from planner.adjuster.state import StateStore

    with StateStore(state) as st:
        assert st.meta()["point"] == "split"
        assert any(j["action"] == "adjust" for j in st.journal_entries())
    code, out = _run([*argv, "--min-dwell", "2h"], capsys)  # the next run starts from the journal
    assert code == 0
    assert out["decision"]["kind"] == "hold" and out["decision"]["from"] == "split"


def test_lease_held_exits_3(setup, capsys):
    plan_file, state, _ = setup
    from planner.adjuster.state import StateStore

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
