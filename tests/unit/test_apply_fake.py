"""apply_point and Controller against an in-memory backend (fast; the real one is in integration)."""

from __future__ import annotations

import pytest
from apply_fakes import FakeBackend, acts, inst, plan, run

from planner.adjuster.apply import apply_point, restart_delay_s
from planner.adjuster.backends.base import Handle
from planner.adjuster.control import Controller
from planner.adjuster.state import InstanceRow, StateStore
from planner.errors import LockHeldError


def test_apply_is_idempotent_and_hops_make_before_break(tmp_path) -> None:
    p = plan(("a", [inst("x-0", 8100)]), ("b", [inst("y-0", 8101, gpus=(1,))]))
    be, st = FakeBackend(), StateStore(tmp_path)
    assert acts(run(p, "a", be, st)) == [("start", "x-0", "ok")]
    assert run(p, "a", be, st).actions == []
    assert acts(run(p, "b", be, st)) == [("start", "y-0", "ok"), ("stop", "x-0", "ok")]
    assert [r.id for r in st.instances()] == ["y-0"]
    assert st.meta()["point"] == "b"
    dry = apply_point(
        p, "a", backend=be, state=st, model_path_resolver=lambda i: "/m", dry_run=True
    )
    assert [(a.action, a.result) for a in dry.actions] == [
        ("start", "planned"),
        ("stop", "planned"),
    ]
    assert [r.id for r in st.instances()] == ["y-0"]  # dry run changed nothing


def test_failure_rolls_back_this_runs_starts_and_keeps_old(tmp_path) -> None:
    p = plan(
        ("a", [inst("x-0", 8100)]),
        ("b", [inst("x-0", 8100), inst("g-0", 8101, gpus=(1,)), inst("bad-0", 8102, gpus=(2,))]),
    )
    be, st = FakeBackend(), StateStore(tmp_path)
    run(p, "a", be, st)
    be.fail["bad-0"] = "bad_model_path"
    res = run(p, "b", be, st)
    assert not res.ok and res.error.reason == "bad_model_path"
    assert acts(res) == [
        ("start", "g-0", "ok"),
        ("start", "bad-0", "failed"),
        ("stop", "g-0", "rolled_back"),
    ]
    rows = {r.id: r for r in st.instances()}
    assert set(rows) == {"x-0", "bad-0"} and rows["bad-0"].status == "failed"
    assert be.is_alive(Handle("x-0", "n", "h", 8100, pid=rows["x-0"].pid))
    assert st.lease_holder() is None  # released after the failure
    journal = [(j["action"], j["instance"], j["result"]) for j in st.journal_entries()]
    assert ("start", "bad-0", "failed") in journal and ("stop", "g-0", "rolled_back") in journal


def test_dead_instance_restarts_with_counted_backoff(tmp_path) -> None:
    p = plan(("a", [inst("x-0", 8100)]))
    be, st = FakeBackend(), StateStore(tmp_path)
    run(p, "a", be, st)
    be.alive.clear()  # the process died
    res = run(p, "a", be, st)
    assert acts(res) == [("restart", "x-0", "ok")]
    assert st.get("x-0").restarts == 1
    be.alive.clear()
    be.fail["x-0"] = "unknown"  # crashes again on start: retried, then given up
    res = run(p, "a", be, st)
    assert not res.ok and st.get("x-0").status == "failed"
    assert [a for a in be.log if a == ("start", "x-0")].__len__() == 1 + 1 + 3


def test_restart_delay_is_exponential_capped_and_resets() -> None:
    row = InstanceRow(
        id="x",
        model="m",
        variant="v",
        node="n",
        port=1,
        status="failed",
        started_at=100.0,
        restarts=0,
    )
    kw = dict(base_s=1.0, cap_s=30.0, stable_s=120.0)
    assert restart_delay_s(row, 110.0, **kw) == 1.0
    row.restarts = 3
    assert restart_delay_s(row, 110.0, **kw) == 8.0
    row.restarts = 10
    assert restart_delay_s(row, 110.0, **kw) == 30.0
    assert restart_delay_s(row, 1000.0, **kw) == 0.0  # it ran long enough


def test_lease_held_by_live_process_blocks_apply(tmp_path) -> None:
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from planner.adjuster.state import StateStore;"
                f"StateStore({str(tmp_path)!r}).acquire_lease(ttl_s=60); print('held', flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeldError, match=f"pid {holder.pid}"):
            run(plan(("a", [inst("x-0", 8100)])), "a", FakeBackend(), StateStore(tmp_path))
    finally:
        holder.kill()
        holder.wait()


def test_controller_wakes_by_start_without_sleep_mode(tmp_path) -> None:
    p = plan(
        ("a", [inst("g-0", 8100), inst("h-0", 8101, tier="host"), inst("d-0", 8102, tier="disk")])
    )
    be, st = FakeBackend(), StateStore(tmp_path)
    assert acts(run(p, "a", be, st)) == [("start", "g-0", "ok")]  # lazy tiers stay stopped on CPU
    c = Controller(p, None, be, st, model_path_resolver=lambda i: "/m")
    assert {k: v[0] for k, v in c.status().items()} == {
        "g-0": "awake",
        "h-0": "asleep",
        "d-0": "asleep",
    }
    assert c.cotenants("h-0") == ["d-0"]
    h = c.wake("h-0", timeout_s=5)
    assert h.port == 8101 and c.status()["h-0"][0] == "awake"
    assert c.wake("h-0", timeout_s=5).pid == h.pid  # already awake: same process
    assert run(p, "a", be, st).actions == []  # apply accepts an awake lazy instance
    c.sleep("h-0")
    assert c.status()["h-0"][0] == "asleep" and not be.is_alive(h)
    assert c.describe()[1]["status"] == "asleep"


def test_controller_uses_sleep_mode_when_present(tmp_path) -> None:
    p = plan(("a", [inst("h-0", 8101, tier="host")]))
    be, st = FakeBackend(supports_sleep=True), StateStore(tmp_path)
    assert acts(run(p, "a", be, st)) == [("start", "h-0", "ok"), ("sleep", "h-0", "ok")]
    c = Controller(p, "a", be, st, model_path_resolver=lambda i: "/m")
    assert c.status()["h-0"][0] == "asleep"
    pid = c.wake("h-0", timeout_s=5).pid
    assert ("wake", "h-0") in be.log and st.get("h-0").pid == pid
    c.sleep("h-0")
    assert st.get("h-0").status == "asleep" and be.alive[pid] == "asleep"


def test_controller_restarts_a_dead_instance_and_counts_it(tmp_path) -> None:
    p = plan(("a", [inst("g-0", 8100)]))
    be, st = FakeBackend(), StateStore(tmp_path)
    run(p, "a", be, st)
    c = Controller(p, None, be, st, model_path_resolver=lambda i: "/m")
    for n in (1, 2):  # two deaths, two restarts: counted and journaled as such
        be.alive.clear()
        assert c.status()["g-0"][0] == "failed"
        h = c.restart("g-0", timeout_s=5)
        assert c.status()["g-0"][0] == "awake" and st.get("g-0").pid == h.pid
        assert st.get("g-0").restarts == n
    journal = [j for j in st.journal_entries() if j["action"] == "restart"]
    assert [j["detail"].split(";")[0] for j in journal] == [
        "restart 1: the process died",
        "restart 2: the process died",
    ]


def test_apply_reports_each_step_as_it_begins_and_ends(tmp_path) -> None:
    """Issue 42 item 5: in a pipe `apply` was silent for minutes (a spinner on a TTY only)."""
    p = plan(("a", [inst("x-0", 8100), inst("y-0", 8101, gpus=(1,))]))
    be = FakeBackend()
    st = StateStore(tmp_path)
    lines = []
    res = apply_point(
        p,
        "a",
        backend=be,
        state=st,
        model_path_resolver=lambda i: "/m",
        timeout_s=5,
        progress=lines.append,
    )
    assert res.ok
    assert [x.split(":")[0] for x in lines] == [
        "[1/2] start x-0 on n",
        "[1/2] start x-0",
        "[2/2] start y-0 on n",
        "[2/2] start y-0",
    ]
    assert lines[1].startswith("[1/2] start x-0: ok (pid ")
