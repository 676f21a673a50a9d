"""A damaged or emptied state database is refused, never recreated; `planner state ...` (issue 16, 1-3).

Real SQLite files, damaged the ways the fuzzing pass did: emptied, a dropped table,
truncated, random bytes, a damaged page, a directory in its place, a column another program
wrote. Every command that opens the state exits 2 naming the file and `planner state`.
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest
from cli_helpers import run_cli_one_line
from plan_files import tiny_cpu_plan

from planner.adjuster.state import DB_NAME, SCHEMA_VERSION, InstanceRow, StateStore


def _state(d, rows: int = 4, pad: str = ""):
    """A state dir that started `rows` instances: rows in `instances`, one journal line each."""
    with StateStore(d) as s:
        for k in range(rows):
            s.upsert(
                InstanceRow(
                    id=f"a-{k}",
                    model="tiny-a" + pad,
                    variant="bf16",
                    node="local",
                    port=18600 + k,
                    status="stopped",
                )
            )
            s.journal("start", f"a-{k}", "local", "ok", "x" * len(pad))
    db = sqlite3.connect(d / DB_NAME)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file
    db.close()
    return d / DB_NAME


def _slo(tmp_path):
    p = tmp_path / "slo.yaml"
    p.write_text("kind: slo\ndefault: {ttft_p95_s: 5}\n")
    return p


def _empty(p):
    p.write_bytes(b"")


def _drop_journal(p):
    db = sqlite3.connect(p)
    db.execute("DROP TABLE journal")
    db.commit()
    db.close()


def _truncate(p):
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3])


def _random(p):
    p.write_bytes(os.urandom(8192))


def _bad_page(p):
    with open(p, "r+b") as f:
        f.seek(4096 * 2)  # a whole b-tree page of a table
        f.write(os.urandom(4096))


def _directory(p):
    p.unlink()
    p.mkdir()


def _gpus_not_json(p):
    db = sqlite3.connect(p)
    db.execute("UPDATE instances SET gpus = '[0, oops' WHERE id = 'a-1'")
    db.commit()
    db.close()


def _newer_version(p):
    db = sqlite3.connect(p)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()


DAMAGE = [
    ("emptied", _empty, "empty (0 bytes)"),
    ("journal dropped", _drop_journal, "lacks table(s) ['journal']"),
    ("truncated", _truncate, "state database"),
    ("random bytes", _random, "not a readable state database"),
    ("damaged page", _bad_page, "state database"),
    ("a directory", _directory, "is a directory"),
    ("gpus not JSON", _gpus_not_json, "instance 'a-1': column gpus"),
    ("newer version", _newer_version, f"schema version {SCHEMA_VERSION + 1}"),
]


@pytest.mark.parametrize("damage,needle", [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_damaged_state_is_refused_and_kept(tmp_path, capsys, damage, needle):
    plan, state = tiny_cpu_plan(tmp_path), tmp_path / "state"
    db = _state(state, pad="p" * 400 if damage is _bad_page else "")
    damage(db)
    before = db.read_bytes() if db.is_file() else None
    for argv in (
        ["status", "--state-dir", state],
        ["apply", plan, "--state-dir", state, "--dry-run"],
        ["apply", plan, "--state-dir", state],
        ["down", "--state-dir", state],
        ["adjust", "--plan", plan, "--slo", _slo(tmp_path), "--state-dir", state, "--once"],
        ["state", "check", "--state-dir", state],
    ):
        code, _, err = run_cli_one_line(argv, capsys)
        assert code == 2, (argv[0], err)
        assert f"{db}:" in err and needle in err, (argv[0], err)
        assert "planner state" in err and "Traceback" not in err, (argv[0], err)
    # never recreated over what it held
    assert (db.read_bytes() if db.is_file() else None) == before


def test_repair_keeps_what_is_readable_and_the_damaged_file(tmp_path, capsys):
    state = tmp_path / "state"
    db = _state(state, rows=300, pad="p" * 200)
    _bad_page(db)
    code, out, _ = run_cli_one_line(["state", "export", "--state-dir", state], capsys)
    assert code == 0
    exported = json.loads(out)
    assert len(exported["tables"]["journal"]) + len(exported["tables"]["instances"]) > 100
    code, out, err = run_cli_one_line(["state", "repair", "--state-dir", state, "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert (state / rep["backup"].split("/")[-1]).is_file()
    assert rep["kept"]["instances"] + rep["kept"]["journal"] > 100
    code, _, _ = run_cli_one_line(["state", "check", "--state-dir", state], capsys)
    assert code == 0
    with StateStore(state) as s:
        assert len(s.instances()) == rep["kept"]["instances"]
        assert s.journal_entries(1)[0]["action"] == "repair"
    code, _, err = run_cli_one_line(["state", "repair", "--state-dir", state], capsys)
    assert code == 2 and "healthy: nothing to repair" in err


def test_repair_of_an_emptied_file_names_the_servers_it_no_longer_manages(tmp_path, capsys):
    state = tmp_path / "state"
    _empty(_state(state))
    (state / "logs").mkdir()
    (state / "logs" / "a-2.log").write_text("vLLM server log\n")
    code, out, err = run_cli_one_line(["state", "repair", "--state-dir", state], capsys)
    assert code == 0, err
    assert "no instance record for a-2" in " ".join(out.split())


def test_dry_run_and_status_write_nothing(tmp_path, capsys):
    """Item 3: `apply --dry-run` (and `status`) on a new state dir create no file."""
    plan, state = tiny_cpu_plan(tmp_path), tmp_path / "state"
    code, _, _ = run_cli_one_line(["apply", plan, "--state-dir", state, "--dry-run"], capsys)
    assert code == 0
    code, _, _ = run_cli_one_line(["status", "--state-dir", state], capsys)
    assert code == 2  # no state dir: said, not read as "nothing applied" (issue 32)
    assert not state.exists()


def test_old_state_files_are_upgraded_and_versioned(tmp_path):
    state = tmp_path / "state"
    db = _state(state)
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version = 0")  # as written before versions
    con.close()
    with StateStore(state) as s:
        assert len(s.instances()) == 4
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.close()


def test_garbage_request_log_is_refused_by_adjust(tmp_path, capsys):
    """Item 2: a garbage requests.sqlite made `adjust --once` crash."""
    plan, state = tiny_cpu_plan(tmp_path), tmp_path / "state"
    state.mkdir()
    (state / "requests.sqlite").write_bytes(os.urandom(4096))
    argv = ["adjust", "--plan", plan, "--slo", _slo(tmp_path), "--state-dir", state, "--once"]
    code, _, err = run_cli_one_line(argv, capsys)
    assert code == 2 and "requests.sqlite" in err and "Traceback" not in err, err


def test_a_read_only_database_is_refused_on_write(tmp_path):
    """Item 2: a state file that cannot be written. Tests run as root, which writes any file,
    so a read-only SQLite connection to a real file stands in for the permission bits."""
    from planner.errors import InputError

    state = tmp_path / "state"
    _state(state)
    with StateStore(state, readonly=True) as s:
        assert len(s.instances()) == 4
        with pytest.raises(InputError, match="read-only"):
            s.journal("start", "a-9", "local", "ok")
