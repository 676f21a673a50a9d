"""The apply state store on a real SQLite file: rows, journal, lease takeover and contention."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import time

import pytest

from planner.adjuster.state import InstanceRow, StateStore, default_state_dir
from planner.errors import LockHeldError


def _row(iid: str = "a-0", **kw) -> InstanceRow:
    base = dict(id=iid, model="a", variant="bf16", node="local", port=8100, status="awake", pid=123)
    return InstanceRow(**{**base, **kw})


def test_rows_roundtrip_update_delete(tmp_path) -> None:
    with StateStore(tmp_path) as s:
        s.upsert(_row(gpus="[0, 1]"))
        s.upsert(_row("b-0", port=8101, status="asleep", tier="host"))
        assert [r.id for r in s.instances()] == ["a-0", "b-0"]
        s.update("a-0", status="failed", pid=None, restarts=2)
        r = s.get("a-0")
        assert r is not None and r.status == "failed" and r.pid is None and r.restarts == 2
        assert r.gpu_list == [0, 1]
        with pytest.raises(KeyError):
            s.update("zz", status="awake")
        s.delete("a-0")
        assert s.get("a-0") is None
    # WAL mode, and the file is plain SQLite
    db = sqlite3.connect(tmp_path / "state.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_journal_and_meta(tmp_path) -> None:
    with StateStore(tmp_path) as s:
        s.journal("start", "a-0", "local", "ok", "pid 1")
        s.journal("stop", "a-0", "local", "failed", "x")
        got = s.journal_entries()
        assert [(j["action"], j["result"]) for j in got] == [("start", "ok"), ("stop", "failed")]
        s.set_meta(point="balanced", plan_sha="abc")
        assert s.meta() == {"point": "balanced", "plan_sha": "abc"}


def test_default_state_dir_honours_xdg(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_state_dir() == tmp_path / "planner"


def _hold(path: str, ready, release) -> None:
    s = StateStore(path)
    s.acquire_lease(purpose="apply", ttl_s=60)
    ready.set()
    release.wait(30)
    s.release_lease()


def _hold_and_die(path: str, ready) -> None:
    s = StateStore(path)
    s.acquire_lease(purpose="apply", ttl_s=600)
    ready.set()
    os._exit(0)  # dies holding the lease


def test_live_holder_fails_fast_naming_it(tmp_path) -> None:
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold, args=(str(tmp_path), ready, release))
    p.start()
    try:
        assert ready.wait(30)
        s = StateStore(tmp_path)
        with pytest.raises(LockHeldError) as ei:
            s.acquire_lease(wait_s=0)
        assert f"pid {p.pid}" in str(ei.value) and s.host in str(ei.value)
        release.set()
        got = s.acquire_lease(wait_s=20)  # waits until the holder lets go
        assert got.holder_pid == os.getpid()
        s.release_lease()
    finally:
        release.set()
        p.join(30)


def test_dead_holder_is_taken_over(tmp_path) -> None:
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_hold_and_die, args=(str(tmp_path), ready))
    p.start()
    p.join(30)
    assert ready.is_set()
    s = StateStore(tmp_path)
    assert s.lease_holder().holder_pid == p.pid
    with s.lease() as got:
        assert got.holder_pid == os.getpid()
    assert s.lease_holder() is None


def test_expired_lease_of_other_host_is_taken_over(tmp_path) -> None:
    s = StateStore(tmp_path)
    s._db.execute(
        "INSERT INTO lease (id, holder_pid, holder_host, purpose, acquired_at, expires_at)"
        " VALUES (1, 1, 'elsewhere', 'apply', ?, ?)",
        (time.time() - 100, time.time() - 1),
    )
    assert s.acquire_lease().holder_host == s.host
    s._db.execute(
        "UPDATE lease SET holder_host='elsewhere', holder_pid=1, expires_at=? WHERE id=1",
        (time.time() + 100,),
    )
    with pytest.raises(LockHeldError, match="elsewhere"):
        s.acquire_lease()


def test_a_lease_whose_holder_pid_was_reused_is_taken_over(tmp_path) -> None:
    """The holder died and a newer process got its pid: the lease is free (before, it looked
    held until it expired). The child stands for the process that reused the pid."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        s = StateStore(tmp_path)
        for acquired_at, held in ((time.time(), True), (time.time() - 3600, False)):
            s._db.execute(
                "INSERT OR REPLACE INTO lease (id, holder_pid, holder_host, purpose, acquired_at,"
                " expires_at) VALUES (1, ?, ?, 'apply', ?, ?)",
                (child.pid, s.host, acquired_at, time.time() + 600),
            )
            if held:
                with pytest.raises(LockHeldError, match=f"pid {child.pid}"):
                    s.acquire_lease()
            else:
                assert s.acquire_lease().holder_pid == os.getpid()
    finally:
        child.kill()
        child.wait()
