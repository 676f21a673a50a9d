"""A state dir on a read-only or full disk (issue 29, item 5): `status` still reads it, and
writes say what is wrong (read-only, disk full), never "repair" (nothing is damaged).

Read-only: a tmpfs remounted read-only where this runs as root (the case WAL cannot open
normally: it must create its -shm file), else a directory without write permission. Full:
SQLite's own SQLITE_FULL through `PRAGMA max_page_count` on the store's connection.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from planner.adjuster.state import StateStore
from planner.adjuster.state_file import InstanceRow
from planner.errors import InputError


def _row(iid: str = "a0") -> InstanceRow:
    return InstanceRow(id=iid, model="a", variant="bf16", node="n", port=8100, status="stopped")


@pytest.fixture
def readonly_state(tmp_path):
    """A state dir holding one instance row, then made read-only."""
    d = tmp_path / "state"
    d.mkdir()
    mounted = os.geteuid() == 0 and (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)]).returncode == 0
    )
    with StateStore(d) as s:
        s.upsert(_row())
    if mounted:
        subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
    else:
        d.chmod(0o555)
        (d / "state.sqlite").chmod(0o444)
    yield d
    if mounted:
        subprocess.run(["umount", "-l", str(d)], check=False)  # lazy: a connection may linger
    else:
        d.chmod(0o755)


def test_status_reads_a_read_only_state_dir(readonly_state, capsys):
    from planner.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["status", "--state-dir", str(readonly_state), "--json"])
    assert e.value.code == 0, capsys.readouterr().err
    rows = json.loads(capsys.readouterr().out)["instances"]
    assert [r["id"] for r in rows] == ["a0"]


def test_writing_a_read_only_state_dir_says_read_only_not_repair(readonly_state):
    with pytest.raises(InputError) as e:  # noqa: SIM117 (the store closes even when it raises)
        with StateStore(readonly_state) as store:
            store.upsert(_row("b0"))
    assert "read-only" in str(e.value) and "repair" not in str(e.value)
    assert e.value.exit_code == 2


def test_a_full_disk_says_full_not_repair(tmp_path: Path):
    store = StateStore(tmp_path)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(InputError) as e:
        for k in range(200):
            store.upsert(
                InstanceRow(
                    id=f"i{k}",
                    model="m" * 2000,
                    variant="bf16",
                    node="n",
                    port=8100 + k,
                    status="asleep",
                )
            )
    assert "full" in str(e.value) and "repair" not in str(e.value)
    store.close()
