"""The apply state store: one SQLite file per state dir.

Tables: `instances` (what this state dir started: pid or Ray actor, node, port, status, plan
hash and point), `journal` (every action and its result), `lease` (one row: the holder of the
apply lock) and `meta` (the plan and point last applied). WAL mode, so readers (status, the
gateway) never block the one writer. The lease is taken inside `BEGIN IMMEDIATE`, which
serialises the check-and-write between processes; a holder that died on this host, or whose
lease expired, is taken over.

Integrity: the file carries its schema version (`PRAGMA user_version`). Opening a file that
is empty, damaged, not SQLite, missing a table or from a newer version raises InputError
(exit 2) naming the file and `planner state check|repair|export`; it is never recreated
over what it held (its journal and the servers it started). A missing file is a new state
dir; read-only opens (`--dry-run`, `status`) of a missing file write nothing.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from planner.engine import pid_alive
from planner.errors import InputError, LockHeldError

DB_NAME = "state.sqlite"
SCHEMA_VERSION = 1  # PRAGMA user_version of files this code writes; 0: written before versions
TABLES = ("instances", "journal", "lease", "meta")
REPAIR_FIX = (
    "see `planner state check --state-dir DIR`; `planner state export` saves what is readable, "
    "`planner state repair` rebuilds the file from it (the damaged file is kept beside it)"
)

_SCHEMA = """
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
    updated_at REAL NOT NULL DEFAULT 0
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


def default_state_dir() -> Path:
    """`$XDG_STATE_HOME/planner`, else `~/.local/state/planner`."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "planner"


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


_COLS = [f.name for f in fields(InstanceRow)]
# what each column may hold once read back (SQLite keeps whatever another program wrote)
_NUM, _NONE = (int, float), type(None)
_COL_TYPES: dict[str, tuple[type, ...]] = {
    **{c: (str,) for c in _COLS},
    "port": (int,),
    "restarts": (int,),
    "pid": (int, _NONE),
    "actor": (str, _NONE),
    "started_at": (*_NUM, _NONE),
    "memory_gib": _NUM,
    "updated_at": _NUM,
}


@dataclass
class Lease:
    """The apply lock as held."""

    holder_pid: int
    holder_host: str
    purpose: str
    acquired_at: float
    expires_at: float


def damaged(path: Path, what: str) -> InputError:
    """The error every unusable state file gives (exit 2, before any side effect)."""
    return InputError(what, file=str(path), fix=REPAIR_FIX)


class StateStore:
    """Access to `<state_dir>/state.sqlite`; safe to open from several processes.

    `readonly`: read what is there and write nothing (a missing file reads as empty).
    """

    def __init__(self, state_dir: str | Path | None = None, *, readonly: bool = False):
        self.dir = Path(state_dir) if state_dir else default_state_dir()
        self.path = self.dir / DB_NAME
        self.readonly = readonly
        self.host = socket.gethostname()
        self.pid = os.getpid()
        if readonly and not self.path.exists():
            self._db = _connect(":memory:")  # nothing applied here yet
            self._db.executescript(_SCHEMA)
            return
        if not readonly:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise InputError(
                    f"cannot create the state dir: {e.strerror}", file=str(self.dir)
                ) from None
        self._db = open_checked(self.path, readonly=readonly)

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def logs_dir(self) -> Path:
        """Where server logs of this state dir go."""
        d = self.dir / "logs"
        d.mkdir(parents=True, exist_ok=True)
        return d

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.OperationalError as e:
            if "readonly" not in str(e):
                raise
            raise InputError(
                "the state database is read-only", file=str(self.path),
                fix="run as the user who owns the state dir, or fix its permissions",
            ) from None  # fmt: skip

    def _row(self, r: sqlite3.Row) -> InstanceRow:
        return InstanceRow(**{c: r[c] for c in _COLS})

    # ------------------------------------------------------------ instances

    def upsert(self, row: InstanceRow) -> None:
        """Insert or replace the row of `row.id`."""
        row.updated_at = time.time()
        d = asdict(row)
        cols = ", ".join(_COLS)
        marks = ", ".join(f":{c}" for c in _COLS)
        with self._tx() as db:
            db.execute(f"INSERT OR REPLACE INTO instances ({cols}) VALUES ({marks})", d)

    def update(self, instance_id: str, **changes: object) -> None:
        """Set some columns of one row (KeyError if the row is absent)."""
        bad = [k for k in changes if k not in _COLS]
        if bad:
            raise ValueError(f"unknown instance columns {bad}")
        changes["updated_at"] = time.time()
        sets = ", ".join(f"{k} = :{k}" for k in changes)
        with self._tx() as db:
            cur = db.execute(
                f"UPDATE instances SET {sets} WHERE id = :_id", {**changes, "_id": instance_id}
            )
            if cur.rowcount == 0:
                raise KeyError(instance_id)

    def get(self, instance_id: str) -> InstanceRow | None:
        """The row of `instance_id`, or None."""
        r = self._db.execute("SELECT * FROM instances WHERE id = ?", (instance_id,)).fetchone()
        return self._row(r) if r else None

    def instances(self) -> list[InstanceRow]:
        """All rows, by id."""
        rows = self._db.execute("SELECT * FROM instances ORDER BY id").fetchall()
        return [self._row(r) for r in rows]

    def delete(self, instance_id: str) -> None:
        """Forget an instance (after it was stopped)."""
        with self._tx() as db:
            db.execute("DELETE FROM instances WHERE id = ?", (instance_id,))

    # ------------------------------------------------------------ journal and meta

    def journal(self, action: str, instance: str, node: str, result: str, detail: str = "") -> None:
        """Append one journal line."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO journal (ts, action, instance, node, result, detail) VALUES (?, ?, ?, ?, ?, ?)",
                (time.time(), action, instance, node, result, detail),
            )

    def journal_entries(self, limit: int = 100) -> list[dict]:
        """The last `limit` journal lines, oldest first."""
        rows = self._db.execute(
            "SELECT ts, action, instance, node, result, detail FROM journal ORDER BY seq DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [dict(r) for r in reversed(rows)]

    def set_meta(self, **kv: str) -> None:
        """Record the applied plan and point (strings)."""
        with self._tx() as db:
            for k, v in kv.items():
                db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (k, str(v)))

    def meta(self) -> dict[str, str]:
        """All meta keys."""
        return {r["key"]: r["value"] for r in self._db.execute("SELECT key, value FROM meta")}

    # ------------------------------------------------------------ lease

    def lease_holder(self) -> Lease | None:
        """The lease as recorded (held or stale), or None."""
        r = self._db.execute("SELECT * FROM lease WHERE id = 1").fetchone()
        if r is None:
            return None
        return Lease(
            r["holder_pid"], r["holder_host"], r["purpose"], r["acquired_at"], r["expires_at"]
        )

    def _is_live(self, lease: Lease, now: float) -> bool:
        if lease.expires_at <= now:
            return False
        if lease.holder_host == self.host:
            return pid_alive(lease.holder_pid)
        return True  # another host's holder: only expiry frees it

    def acquire_lease(
        self, *, purpose: str = "apply", ttl_s: float = 600.0, wait_s: float = 0.0
    ) -> Lease:
        """Take the lease; wait up to `wait_s` for a live holder, then raise LockHeldError."""
        deadline = time.monotonic() + wait_s
        while True:
            with self._tx() as db:
                now = time.time()
                cur = self.lease_holder()
                mine = (
                    cur is not None and cur.holder_pid == self.pid and cur.holder_host == self.host
                )
                if cur is None or mine or not self._is_live(cur, now):
                    new = Lease(self.pid, self.host, purpose, now, now + ttl_s)
                    db.execute(
                        "INSERT OR REPLACE INTO lease (id, holder_pid, holder_host, purpose, acquired_at, expires_at)"
                        " VALUES (1, ?, ?, ?, ?, ?)",
                        (
                            new.holder_pid,
                            new.holder_host,
                            new.purpose,
                            new.acquired_at,
                            new.expires_at,
                        ),
                    )
                    return new
            if time.monotonic() >= deadline:
                assert cur is not None
                raise LockHeldError(
                    f"another {cur.purpose} holds the state lease of {self.dir}: pid {cur.holder_pid} "
                    f"on host {cur.holder_host}, for {now - cur.acquired_at:.0f} s "
                    f"(expires in {cur.expires_at - now:.0f} s)",
                    fix="wait for it to finish, or stop that process; a dead holder is taken over",
                )
            time.sleep(0.2)

    def renew_lease(self, ttl_s: float = 600.0) -> None:
        """Push the expiry of our own lease forward (no-op if not ours)."""
        with self._tx() as db:
            db.execute(
                "UPDATE lease SET expires_at = ? WHERE id = 1 AND holder_pid = ? AND holder_host = ?",
                (time.time() + ttl_s, self.pid, self.host),
            )

    def release_lease(self) -> None:
        """Drop our lease (no-op if another process holds it)."""
        with self._tx() as db:
            db.execute(
                "DELETE FROM lease WHERE id = 1 AND holder_pid = ? AND holder_host = ?",
                (self.pid, self.host),
            )

    @contextmanager
    def lease(
        self, *, purpose: str = "apply", ttl_s: float = 600.0, wait_s: float = 0.0
    ) -> Iterator[Lease]:
        """Hold the lease for a block."""
        got = self.acquire_lease(purpose=purpose, ttl_s=ttl_s, wait_s=wait_s)
        try:
            yield got
        finally:
            self.release_lease()


def _connect(target: str) -> sqlite3.Connection:
    # autocommit mode: every transaction is explicit
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
    schema and a schema version this code knows. A file from before versions is upgraded
    (unless `readonly`).
    """
    if path.is_dir():
        raise damaged(path, "is a directory, not the state database")
    new = not path.exists()
    if not new and path.stat().st_size == 0:
        raise damaged(
            path,
            "the state database is empty (0 bytes): its journal and the record of the servers "
            "it started are gone; it is not recreated over them",
        )
    mode = "ro" if readonly else ("rwc" if new else "rw")
    try:
        db = _connect(f"file:{path}?mode={mode}")
        db.execute("PRAGMA busy_timeout=30000")
        if new:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            return db
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            db.close()
            raise damaged(path, f"the state database is damaged ({check})")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.OperationalError as e:
        raise damaged(path, f"cannot open the state database: {e}") from None
    except sqlite3.DatabaseError as e:
        raise damaged(path, f"not a readable state database: {e}") from None
    except UnicodeDecodeError:  # SQLite's message quotes a damaged schema: not UTF-8
        raise damaged(path, "the state database is damaged (its schema is not text)") from None
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
    if version < SCHEMA_VERSION and not readonly:
        _upgrade(db)
    for r in db.execute("SELECT * FROM instances"):
        keys = r.keys()
        bad = InstanceRow(**{c: r[c] for c in _COLS if c in keys}).problem()
        if bad is not None:
            db.close()
            raise damaged(path, bad)
    return db


def _upgrade(db: sqlite3.Connection) -> None:
    """Files written before schema versions get the newer columns (with their defaults)."""
    have = {r["name"] for r in db.execute("PRAGMA table_info(instances)")}
    extra = {"memory_gib": "REAL NOT NULL DEFAULT 0"}
    for col, decl in extra.items():
        if col not in have:
            db.execute(f"ALTER TABLE instances ADD COLUMN {col} {decl}")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
