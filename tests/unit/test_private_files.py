"""The state dir is 0700, the state DB, request log and engine logs 0600, under umask 022.

Real SQLite files and a real spawned process writing its log (a tiny Python child stands in
for the vLLM server: the log file is opened by the planner before the child runs)."""

from __future__ import annotations

import logging
import os
import stat
import sys
from pathlib import Path

import pytest

from planner.adjuster.decisions import DecisionLog
from planner.adjuster.gateway.requestlog import RequestLog
from planner.adjuster.state import StateStore
from planner.engines import process


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_new_state_dir_and_files_are_private(tmp_path, umask_022, caplog):
    sd = tmp_path / "state"
    store = StateStore(sd)
    store.journal("apply", "x", "n", "ok")  # writes through the WAL
    log = RequestLog(sd / "requests.sqlite")
    log.add((1.0, "u", "s", "m", 1, 1, 0, None, 0.1, 0.0, 200, "i", "m", 0))
    log.flush()
    DecisionLog(sd).close()
    proc = process.start_server([sys.executable, "-c", "print('up')"], {}, store.logs_dir / "a.log")
    proc.wait(timeout=30)
    assert _mode(sd) == 0o700
    assert _mode(store.logs_dir) == 0o700
    files = [sd / "state.sqlite", sd / "requests.sqlite", store.logs_dir / "a.log"]
    files += [p for p in sd.iterdir() if p.name.endswith(("-wal", "-shm"))]
    assert len(files) > 3  # the WAL companions exist while the connections are open
    for p in files:
        assert _mode(p) == 0o600, p
    assert (store.logs_dir / "a.log").read_text().strip() == "up"
    assert not [r for r in caplog.records if r.name == "planner.security"]  # new: no note
    log.close()
    store.close()


def test_existing_wide_dir_and_files_are_tightened_with_a_note(tmp_path, umask_022, caplog):
    sd = tmp_path / "state"
    sd.mkdir(mode=0o755)
    os.chmod(sd, 0o755)
    StateStore(sd).close()
    os.chmod(sd / "state.sqlite", 0o644)
    os.chmod(sd, 0o755)
    with caplog.at_level(logging.WARNING, logger="planner.security"):
        StateStore(sd).close()
    assert _mode(sd) == 0o700
    assert _mode(sd / "state.sqlite") == 0o600
    notes = [r.getMessage() for r in caplog.records]
    assert any("tightened" in n and str(sd) in n and "755" in n for n in notes), notes


def test_making_an_open_database_private_keeps_its_locks(tmp_path):
    """private_sqlite on a database this process has open must not drop its locks: closing any
    descriptor of the file releases every POSIX lock the process holds on it, and another
    process could then write beside a transaction in flight (the state DB was found malformed
    after an integration run that opened StateStores while a gateway wrote)."""
    import sqlite3
    import subprocess
    import sys

    from planner.private import private_sqlite

    db = tmp_path / "state.sqlite"
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.execute("BEGIN IMMEDIATE")  # this process holds the write lock
    con.execute("INSERT INTO t VALUES (1)")
    private_sqlite(db)  # what every StateStore open does
    other = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
        "try:\n    c.execute('BEGIN IMMEDIATE'); print('got the lock')\n"
        "except sqlite3.OperationalError as e:\n    print(e)"
    )
    out = subprocess.run(
        [sys.executable, "-c", other, str(db)], capture_output=True, text=True, timeout=60
    ).stdout
    con.execute("COMMIT")
    con.close()
    assert "locked" in out, out
