"""Look at, save and rebuild a damaged state database (`planner state check|export|repair`).

`export` reads whatever rows of every table can still be read (a whole-table read, else row
by row, so one damaged page costs its own rows only). `repair` keeps the damaged file (and
its WAL) beside the new one as `state.sqlite.damaged-<epoch s>`, rebuilds the file from
the exported rows, journals what it saved and lost, and names the server logs whose
instance record is gone: those servers may still run and are no longer managed.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from planner.adjuster.state import StateStore, default_state_dir
from planner.adjuster.state_file import DB_NAME, TABLES, InstanceRow, lenient_text, open_checked
from planner.errors import InputError

_ROWID_PROBE = 100_000  # highest rowid tried when a table cannot be read whole
_MISSES = 1_000  # consecutive absent rowids that end the probe


def state_path(state_dir: str | Path | None) -> Path:
    """`<state dir>/state.sqlite`."""
    return (Path(state_dir) if state_dir else default_state_dir()) / DB_NAME


def check(state_dir: str | Path | None) -> list[str]:
    """The problem of the state file ([] when it is healthy or absent: nothing applied)."""
    path = state_path(state_dir)
    if not path.exists():
        return []
    try:
        open_checked(path, readonly=True).close()
    except InputError as e:
        return [e.message.removeprefix(f"{path}: ")]
    return []


def _value(v: Any) -> Any:
    return v.hex() if isinstance(v, bytes) else v


def _read_table(db: sqlite3.Connection, table: str) -> tuple[list[dict[str, Any]], str]:
    """(readable rows, what could not be read: '' when nothing) of one table."""
    q = f'SELECT rowid AS "_rowid", * FROM "{table}"'  # table names come from sqlite_master
    try:
        cur = db.execute(q)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, map(_value, r), strict=True)) for r in cur.fetchall()], ""
    except (sqlite3.DatabaseError, UnicodeDecodeError):
        pass
    rows = []
    bad = []
    misses = 0
    for rowid in range(1, _ROWID_PROBE):  # row by row: a damaged page costs its own rows
        try:
            cur = db.execute(q + " WHERE rowid = ?", (rowid,))
            r = cur.fetchone()
        except (sqlite3.DatabaseError, UnicodeDecodeError):
            r = None
            bad.append(rowid)
        if r is None:
            misses += 1
            if misses >= _MISSES:
                break
            continue
        misses = 0
        names = [d[0] for d in cur.description]
        rows.append(dict(zip(names, map(_value, r), strict=True)))
    if not rows:
        return [], "the whole table"
    return rows, f"rows on damaged pages (rowids {bad[0]}..{bad[-1]})" if bad else ""


def export(state_dir: str | Path | None) -> dict[str, Any]:
    """Every readable row of every table, and what could not be read."""
    path = state_path(state_dir)
    out: dict[str, Any] = {"file": str(path), "tables": {}, "schemas": {}, "unreadable": {}}
    if not path.is_file() or path.stat().st_size == 0:
        out["unreadable"]["(file)"] = "absent" if not path.exists() else "empty or not a file"
        return out
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as e:
        out["unreadable"]["(file)"] = str(e)
        return out
    db.text_factory = lenient_text
    try:
        try:
            found = db.execute("SELECT name, sql FROM sqlite_master WHERE type='table'").fetchall()
            tables = {n: s for n, s in found if not n.startswith("sqlite_")}
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
            out["unreadable"]["(schema)"] = str(e)
            tables = dict.fromkeys(TABLES, "")
        for name, sql in tables.items():
            rows, lost = _read_table(db, name)
            out["tables"][name] = rows
            out["schemas"][name] = sql
            if lost:
                out["unreadable"][name] = lost
    finally:
        db.close()
    return out


def repair(state_dir: str | Path | None, *, force: bool = False) -> dict[str, Any]:
    """Rebuild the state file from its readable rows; the damaged file is kept beside it."""
    path = state_path(state_dir)
    problems = check(state_dir)
    if not path.exists():
        raise InputError("no state database here: nothing to repair", file=str(path))
    if not problems and not force:
        raise InputError(
            "the state database is healthy: nothing to repair",
            file=str(path),
            fix="`planner state check` says so too; pass --force to rebuild it anyway",
        )
    saved = export(state_dir)
    stamp = int(time.time())
    backup = path.with_name(f"{DB_NAME}.damaged-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(path) + suffix)
        if src.exists():
            src.rename(Path(str(backup) + suffix))
    counts = _rebuild(path, saved)
    lost = saved["unreadable"]
    with StateStore(path.parent) as st:
        known = {r.id for r in st.instances()}
        logs = sorted(p.stem for p in (path.parent / "logs").glob("*.log"))
        orphans = [i for i in logs if i not in known]
        st.journal(
            "repair",
            "",
            "",
            "ok",
            f"rebuilt from {backup.name}: kept {counts}; unreadable {lost or 'nothing'}",
        )
    return {
        "file": str(path),
        "backup": str(backup),
        "problems": problems,
        "kept": counts,
        "unreadable": lost,
        "unmanaged_logs": orphans,
    }


def _rebuild(path: Path, saved: dict[str, Any]) -> dict[str, int]:
    """A fresh state file holding the saved rows that are still whole; rows kept per table."""
    db = open_checked(path)
    counts: dict[str, int] = {}
    try:
        for table, rows in saved["tables"].items():
            if table == "lease":
                continue  # a lease of a damaged file protects nothing
            sql = saved["schemas"].get(table) or ""
            if table not in TABLES and sql.upper().startswith("CREATE TABLE"):
                db.execute(sql.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
            have = {r[1] for r in db.execute(f'PRAGMA table_info("{table}")')}
            kept = 0
            for row in rows:
                row = {k: v for k, v in row.items() if k in have}
                if table == "instances" and _bad_instance(row):
                    continue
                cols = ", ".join(f'"{c}"' for c in row)
                marks = ", ".join("?" for _ in row)
                try:
                    db.execute(
                        f'INSERT INTO "{table}" ({cols}) VALUES ({marks})', tuple(row.values())
                    )
                    kept += 1
                except sqlite3.Error:
                    continue  # a row that no longer fits its table's constraints
            counts[table] = kept
    finally:
        db.close()
    return counts


def _bad_instance(row: dict[str, Any]) -> bool:
    fields = InstanceRow.__dataclass_fields__
    try:
        return InstanceRow(**{k: v for k, v in row.items() if k in fields}).problem() is not None
    except TypeError:  # a required column is missing
        return True
