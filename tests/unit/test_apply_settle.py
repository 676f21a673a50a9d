"""Issue 29 item 4: no stale rows. What an interrupted apply (kill -9) or a crash leaves in the
state is replaced by what runs, and the journal says what happened (in-memory backend of
test_apply_fake; the vLLM-CPU case is test_apply_vllm's killed apply)."""

from __future__ import annotations

from apply_fakes import FakeBackend, acts, inst, plan, run

from planner.adjuster.apply import settle
from planner.adjuster.state import InstanceRow, StateStore


def _row(iid: str, status: str, pid: int, tier: str = "gpu") -> InstanceRow:
    return InstanceRow(
        id=iid,
        model="m",
        variant="bf16",
        node="n",
        port=8100,
        status=status,
        pid=pid,
        tier=tier,
        gpus="[0]",
    )


def _journal(st: StateStore) -> list[tuple[str, str, str]]:
    return [(j["action"], j["instance"], j["result"]) for j in st.journal_entries()]


def test_a_start_that_came_up_after_its_apply_was_killed_is_recorded_awake(tmp_path):
    """Before: the next apply adopted the server but left its row `starting` for ever, with
    nothing in the journal."""
    p = plan(("a", [inst("x-0", 8100)]))
    be, st = FakeBackend(), StateStore(tmp_path)
    h = be.start(p.point("a").instances[0], model_path="/m", served_name="m", log_path="")
    st.upsert(_row("x-0", "starting", h.pid))  # the apply was killed right after the spawn
    res = run(p, "a", be, st)
    assert res.ok and res.actions == []  # adopted, not started a second time
    assert st.get("x-0").status == "awake" and st.get("x-0").pid == h.pid
    assert ("adopt", "x-0", "ok") in _journal(st)


def test_settle_writes_the_real_state_of_every_row(tmp_path):
    be, st = FakeBackend(supports_sleep=False), StateStore(tmp_path)
    p = plan(
        (
            "a",
            [
                inst("up-0", 8100),
                inst("gone-0", 8101, gpus=(1,)),
                inst("lazy-0", 8102, gpus=(2,), tier="host"),
                inst("dead-0", 8103, gpus=(3,)),
            ],
        )
    )
    pids = {
        i.id: be.start(i, model_path="/m", served_name="m", log_path="").pid
        for i in p.point("a").instances
    }
    st.upsert(_row("up-0", "starting", pids["up-0"]))
    st.upsert(_row("gone-0", "starting", pids["gone-0"]))
    st.upsert(_row("lazy-0", "awake", pids["lazy-0"], tier="host"))
    st.upsert(_row("dead-0", "awake", pids["dead-0"]))
    for iid in ("gone-0", "lazy-0", "dead-0"):
        be.alive.pop(pids[iid])
    seen = settle(st, be)
    got = {r.id: (r.status, r.pid) for r in st.instances()}
    assert got == {
        "up-0": ("awake", pids["up-0"]),
        "gone-0": ("stopped", None),  # its start was interrupted: nothing runs
        "lazy-0": ("stopped", None),  # asleep == stopped without sleep mode
        "dead-0": ("failed", pids["dead-0"]),  # restarted (and its pid stopped) by apply
    }
    assert {k: o.status for k, o in seen.items()} == {k: v[0] for k, v in got.items()}
    j = _journal(st)
    assert ("adopt", "up-0", "ok") in j and ("start", "gone-0", "interrupted") in j
    assert ("lost", "lazy-0", "stopped") in j and ("lost", "dead-0", "failed") in j
    assert settle(st, be) == seen and len(_journal(st)) == len(j)  # once written, quiet


def test_down_drains_until_the_next_apply_and_adjust_keeps_it_down(tmp_path):
    """Issue 29 item 3, the state side: `down` leaves a drain that the gateway's controller
    obeys (nothing wakes or restarts), a hop of `adjust` keeps, and `apply` lifts."""
    import pytest

    from planner.adjuster.apply import apply_point, down
    from planner.adjuster.control import Controller
    from planner.errors import DrainedError

    p = plan(("a", [inst("x-0", 8100)]))
    be, st = FakeBackend(), StateStore(tmp_path)
    run(p, "a", be, st)
    down(st, be)
    assert st.meta()["drained"].startswith("drained by planner down")
    ctl = Controller(p, None, be, st, model_path_resolver=lambda i: "/m")
    for call in (ctl.wake, ctl.restart):
        with pytest.raises(DrainedError, match="drained by planner down"):
            call("x-0", 5)
    assert be.alive == {}  # nothing started
    hop = apply_point(
        p,
        "a",
        backend=be,
        state=st,
        model_path_resolver=lambda i: "/m",
        timeout_s=5,
        lease=False,
        undrain=False,
    )
    assert isinstance(hop.error, DrainedError) and hop.actions == [] and be.alive == {}
    assert acts(run(p, "a", be, st)) == [("start", "x-0", "ok")]
    assert st.meta()["drained"] == ""
    assert ctl.wake("x-0", 5).pid in be.alive  # woken again (already awake here)
