"""The state file's numbered migrations (adjuster/state_file.py MIGRATIONS): a file of every
older schema version, built here as that version wrote it, opens upgraded in one transaction
with its rows kept; a file of a newer version is refused, untouched."""

from __future__ import annotations

import re
import sqlite3

import pytest

from planner.adjuster import state_file
from planner.adjuster.state import DB_NAME, SCHEMA_VERSION, InstanceRow, StateStore
from planner.errors import InputError

# The history, as this test knows it: the version that added each column of `instances`
# (a column not listed was there from the start).
ADDED_IN = {"memory_gib": 1, "secret": 2, "engine": 3, "ref": 3}


def _old_schema(version: int) -> str:
    """state_file.SCHEMA without the columns added after `version`."""
    later = {c for c, v in ADDED_IN.items() if v > version}
    keep = [ln for ln in state_file.SCHEMA.splitlines() if ln.strip().split(" ")[0] not in later]
    return re.sub(r",\n\);", "\n);", "\n".join(keep))  # no comma after the last column


def _old_file(d, version: int):
    """A state dir whose file is as `version` wrote it: one instance row, one journal line."""
    d.mkdir()
    db = sqlite3.connect(d / DB_NAME)
    db.executescript(_old_schema(version))
    db.execute(
        "INSERT INTO instances (id, model, variant, node, port, pid, status) "
        "VALUES ('a-0', 'tiny-a', 'bf16', 'local', 18600, 4242, 'awake')"
    )
    db.execute("INSERT INTO journal (ts, action, result) VALUES (1.0, 'start', 'ok')")
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()
    return d / DB_NAME


def _version_and_columns(path) -> tuple[int, set[str]]:
    db = sqlite3.connect(path)
    version = db.execute("PRAGMA user_version").fetchone()[0]
    cols = {r[1] for r in db.execute("PRAGMA table_info(instances)")}
    db.close()
    return version, cols


def test_the_steps_are_numbered_one_per_version():
    assert len(state_file.MIGRATIONS) == SCHEMA_VERSION
    assert set(ADDED_IN.values()) <= set(range(1, SCHEMA_VERSION + 1))


@pytest.mark.parametrize("version", range(SCHEMA_VERSION))
def test_every_older_version_is_upgraded_with_its_rows(tmp_path, version):
    path = _old_file(tmp_path / "state", version)
    before, cols = _version_and_columns(path)
    assert before == version and not cols & {c for c, v in ADDED_IN.items() if v > version}
    with StateStore(tmp_path / "state") as s:
        (row,) = s.instances()
        assert len(s.journal_entries()) == 1
    # the row kept what it held; the new columns hold their defaults (an old row ran vLLM
    # and records its server by pid)
    assert row == InstanceRow(
        id="a-0",
        model="tiny-a",
        variant="bf16",
        node="local",
        port=18600,
        pid=4242,
        status="awake",
        memory_gib=0.0,
        secret="",
        engine="vllm",
        ref="",
    )
    assert row.has_process and row.label == "pid 4242"
    after, cols = _version_and_columns(path)
    assert after == SCHEMA_VERSION
    assert cols == set(state_file.COLUMNS)


def test_a_failed_step_leaves_the_file_at_its_version(tmp_path, monkeypatch):
    """One transaction: the steps before a failing one are rolled back with it. A step that
    fails after adding its column is a fake (a real step fails only on a fault such as a full
    disk, which the test cannot make)."""

    def failing(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE instances ADD COLUMN engine TEXT NOT NULL DEFAULT 'vllm'")
        raise sqlite3.OperationalError("disk I/O error (a fake)")

    steps = (*state_file.MIGRATIONS[:-1], failing)
    monkeypatch.setattr(state_file, "MIGRATIONS", steps)
    path = _old_file(tmp_path / "state", 0)
    with pytest.raises(InputError, match="cannot upgrade the state database"):
        StateStore(tmp_path / "state")
    version, cols = _version_and_columns(path)
    assert version == 0
    assert not cols & set(ADDED_IN)  # memory_gib and secret (steps 1, 2) rolled back too


def test_a_newer_version_is_refused_untouched(tmp_path):
    path = _old_file(tmp_path / "state", SCHEMA_VERSION)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    before = path.read_bytes()
    with pytest.raises(InputError) as e:
        StateStore(tmp_path / "state")
    assert f"schema version {SCHEMA_VERSION + 1}; this planner reads up to {SCHEMA_VERSION}" in (
        str(e.value)
    )
    assert e.value.file == str(path) and "newer planner" in e.value.fix
    assert path.read_bytes() == before
