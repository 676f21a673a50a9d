"""The state file: its tables, the instance row, and the integrity check every open runs.

The file carries its schema version (`PRAGMA user_version`). Opening a file that is empty,
damaged, not SQLite, missing a table, holding a row another program damaged, or from a newer
version raises InputError (exit 2) naming the file and `planner state check|repair|export`;
it is never recreated over what it held (its journal and the servers it started).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from planner.errors import InputError

DB_NAME = "state.sqlite"
# one numbered migration step: SQL run on the open file (MIGRATIONS; SCHEMA_VERSION, the
# PRAGMA user_version of files this code writes, is their count)
Migration = Callable[[sqlite3.Connection], None]
TABLES = ("instances", "journal", "lease", "meta")
REPAIR_FIX = (
    "see `planner state check --state-dir DIR`; `planner state export` saves what is readable, "
    "`planner state repair` rebuilds the file from it (the damaged file is kept beside it)"
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    variant TEXT NOT NULL,
    node TEXT NOT NULL,
    host TEXT NOT NULL DEFAULT '127.0.0.1',
    port INTEGER NOT NULL,
    pid INTEGER,
    actor TEXT,
    status TEXT NOT NULL,
    tier TEXT NOT NULL DEFAULT 'gpu',
    plan_sha TEXT NOT NULL DEFAULT '',
    point TEXT NOT NULL DEFAULT '',
    started_at REAL,
    restarts INTEGER NOT NULL DEFAULT 0,
    log_path TEXT NOT NULL DEFAULT '',
    spec_sha TEXT NOT NULL DEFAULT '',
    gpus TEXT NOT NULL DEFAULT '[]',
    memory_gib REAL NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL DEFAULT 0,
    secret TEXT NOT NULL DEFAULT '',
    engine TEXT NOT NULL DEFAULT 'vllm',
    ref TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    action TEXT NOT NULL,
    instance TEXT NOT NULL DEFAULT '',
    node TEXT NOT NULL DEFAULT '',
    result TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder_pid INTEGER NOT NULL,
    holder_host TEXT NOT NULL,
    purpose TEXT NOT NULL DEFAULT '',
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass
class InstanceRow:
    """One instance this state dir knows about. `status`: awake|asleep|stopped|starting|failed."""

    id: str
    model: str
    variant: str
    node: str
    port: int
    status: str
    host: str = "127.0.0.1"
    pid: int | None = None
    actor: str | None = None
    tier: str = "gpu"
    plan_sha: str = ""
    point: str = ""
    started_at: float | None = None
    restarts: int = 0
    log_path: str = ""
    spec_sha: str = ""  # hash of the plan's Instance: a change means a restart
    gpus: str = "[]"  # JSON list of device indices
    memory_gib: float = 0.0  # per GPU when awake, GiB (from the plan it was started from)
    updated_at: float = 0.0
    # the instance's API key (version 2): the file is 0600 in a 0700 dir; never printed
    secret: str = field(default="", repr=False)
    engine: str = "vllm"  # the instance's engine.kind (version 3; planner/engines/)
    ref: str = ""  # the backend's opaque reference to its server (version 3; Handle.ref)

    @property
    def has_process(self) -> bool:
        """Whether the row records a server its backend started (its opaque reference; a
        pid or an actor in rows written before version 3): callers ask this, never which."""
        return bool(self.ref) or self.pid is not None or self.actor is not None

    @property
    def label(self) -> str:
        """The recorded reference, for messages (`pid 123`, `actor planner-node-a`)."""
        if self.ref:
            return self.ref
        return f"pid {self.pid}" if self.pid is not None else f"actor {self.actor}"

    @property
    def gpu_list(self) -> list[int]:
        """Device indices as a list."""
        return list(json.loads(self.gpus or "[]"))

    def problem(self) -> str | None:
        """What makes this row unusable (a column another program damaged), or None."""
        for f in fields(self):
            v = getattr(self, f.name)
            want = _COL_TYPES[f.name]
            if not isinstance(v, want) or isinstance(v, bool):
                return f"instance {self.id!r}: column {f.name} holds {v!r}"
        try:
            ok = all(isinstance(g, int) for g in self.gpu_list)
        except (json.JSONDecodeError, TypeError):
            ok = False
        if not ok:
            return f"instance {self.id!r}: column gpus holds {self.gpus!r}, not a JSON list of ids"
        return None


COLUMNS = [f.name for f in fields(InstanceRow)]
# the columns that say nothing runs (a stopped or failed instance)
NO_PROCESS: dict[str, object] = {"pid": None, "actor": None, "ref": ""}
# what each column may hold once read back (SQLite keeps whatever another program wrote)
_NUM, _NONE = (int, float), type(None)
_COL_TYPES: dict[str, tuple[type, ...]] = {
    **{c: (str,) for c in COLUMNS},
    "port": (int,),
    "restarts": (int,),
    "pid": (int, _NONE),
    "actor": (str, _NONE),
    "started_at": (*_NUM, _NONE),
    "memory_gib": _NUM,
    "updated_at": _NUM,
}


def damaged(path: Path, what: str) -> InputError:
    """The error every unusable state file gives (exit 2, before any side effect)."""
    return InputError(what, file=str(path), fix=REPAIR_FIX)


def unwritable(path: Path, e: sqlite3.OperationalError) -> InputError | None:
    """The error for a disk that is full or read-only (nothing is damaged: no "repair"), or
    None when `e` is something else."""
    text = str(e).lower()
    if "full" in text:
        return InputError(
            "the disk holding the state database is full",
            file=str(path),
            fix="free space on it (nothing is damaged), then run the command again",
        )
    if "readonly" in text or "read-only" in text or not os.access(path.parent, os.W_OK):
        return InputError(
            "the state dir or its database is read-only",
            file=str(path),
            fix="run as the user who owns the state dir, or make it writable "
            "(`planner status` reads a read-only one)",
        )
    return None


def _readable(db: sqlite3.Connection, path: Path) -> sqlite3.Connection:
    """`db` if it can read; else, on a read-only dir or file system (WAL needs to create its
    -shm file beside the database), the file opened as immutable (no locks: nothing can
    write it there either)."""
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return db
    except sqlite3.OperationalError:
        if os.access(path.parent, os.W_OK) and not _read_only_fs(path.parent):
            raise
    db.close()
    db = connect(f"file:{path}?mode=ro&immutable=1")
    db.execute("PRAGMA busy_timeout=30000")
    return db


def _read_only_fs(d: Path) -> bool:
    try:
        return bool(os.statvfs(d).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def connect(target: str) -> sqlite3.Connection:
    """A connection in autocommit mode (every transaction is explicit), rows by name."""
    db = sqlite3.connect(
        target, timeout=30.0, isolation_level=None, check_same_thread=False, uri=True
    )
    db.row_factory = sqlite3.Row
    db.text_factory = lenient_text  # a damaged text cell reads as U+FFFD, not as an exception
    return db


def lenient_text(raw: bytes) -> str:
    """SQLite text as str; bytes that are not UTF-8 (damage) become U+FFFD."""
    return raw.decode("utf-8", "replace")


def open_checked(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """A connection to the state file at `path`, created when absent; InputError when unusable.

    An existing file must be a whole SQLite database (quick_check) with every table of the
    schema and a schema version this code knows. A file of an older version is upgraded by the
    numbered MIGRATIONS (unless `readonly`); one of a newer version is refused.
    """
    new = _is_new(path)
    mode = "ro" if readonly else ("rwc" if new else "rw")
    try:
        db = connect(f"file:{path}?mode={mode}")
        db.execute("PRAGMA busy_timeout=30000")
        if readonly:
            db = _readable(db, path)
        if new:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            return db
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            db.close()
            raise damaged(path, f"the state database is damaged ({check})")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.OperationalError as e:
        raise unwritable(path, e) or damaged(path, f"cannot open the state database: {e}") from None
    except sqlite3.DatabaseError as e:
        raise damaged(path, f"not a readable state database: {e}") from None
    except UnicodeDecodeError:  # SQLite's message quotes a damaged schema: not UTF-8
        raise damaged(path, "the state database is damaged (its schema is not text)") from None
    _check_schema(db, path, have, version)
    if version < SCHEMA_VERSION and not readonly:
        try:
            _upgrade(db)
        except sqlite3.OperationalError as e:
            db.close()
            raise unwritable(path, e) or damaged(
                path, f"cannot upgrade the state database: {e}"
            ) from None
    _check_rows(db, path)
    return db


def _is_new(path: Path) -> bool:
    """Whether the state file is still to be created; InputError where something unusable
    (a directory, an emptied file) stands in its place."""
    if path.is_dir():
        raise damaged(path, "is a directory, not the state database")
    new = not path.exists()
    if not new and path.stat().st_size == 0:
        raise damaged(
            path,
            "the state database is empty (0 bytes): its journal and the record of the servers "
            "it started are gone; it is not recreated over them",
        )
    return new


def _check_schema(db: sqlite3.Connection, path: Path, have: set[str], version: int) -> None:
    """InputError (and `db` closed) when a table is missing or the schema is newer than this
    code."""
    missing = [t for t in TABLES if t not in have]
    if missing:
        db.close()
        raise damaged(path, f"the state database lacks table(s) {missing}")
    if version > SCHEMA_VERSION:
        db.close()
        raise InputError(
            f"the state database has schema version {version}; this planner reads up to "
            f"{SCHEMA_VERSION}",
            file=str(path),
            fix="use the newer planner that wrote it (`planner state export` saves its rows)",
        )


def _check_rows(db: sqlite3.Connection, path: Path) -> None:
    """InputError (and `db` closed) when an instance row holds a value no start wrote."""
    for r in db.execute("SELECT * FROM instances"):
        keys = r.keys()
        bad = InstanceRow(**{c: r[c] for c in COLUMNS if c in keys}).problem()
        if bad is not None:
            db.close()
            raise damaged(path, bad)


def _add_columns(**decls: str) -> Migration:
    """A step that adds columns to `instances`, each with its default. A column already there
    is left as it is: files written before version numbers (user_version 0) hold some of the
    later columns, and a file at any version may have been upgraded part way by hand."""

    def step(db: sqlite3.Connection) -> None:
        have = {r["name"] for r in db.execute("PRAGMA table_info(instances)")}
        for col, decl in decls.items():
            if col not in have:
                db.execute(f"ALTER TABLE instances ADD COLUMN {col} {decl}")

    return step


# The numbered migrations: MIGRATIONS[v] takes a file of schema version v to v + 1; a file
# gets every step from its version on, in order, in one transaction (`_upgrade`). A new
# version appends a step here and the column to SCHEMA; a step is never edited once shipped.
MIGRATIONS: tuple[Migration, ...] = (
    _add_columns(memory_gib="REAL NOT NULL DEFAULT 0"),  # 0 -> 1: per-GPU memory when awake
    _add_columns(secret="TEXT NOT NULL DEFAULT ''"),  # 1 -> 2: the instance's API key
    # 2 -> 3: the engine kind and the backend's reference; an older row ran vLLM, the only
    # engine then, and keeps its pid or actor (InstanceRow.has_process reads either)
    _add_columns(engine="TEXT NOT NULL DEFAULT 'vllm'", ref="TEXT NOT NULL DEFAULT ''"),
)
SCHEMA_VERSION = len(MIGRATIONS)  # PRAGMA user_version of files this code writes


def _upgrade(db: sqlite3.Connection) -> None:
    """Apply the steps from the file's version to SCHEMA_VERSION in one transaction, and record
    the version reached (user_version is part of it: a failed step leaves the file as it was).
    The version is read again under the write lock: another process may have upgraded it."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        for step in MIGRATIONS[version:]:
            step(db)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
