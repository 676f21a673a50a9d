"""The apply state store: one SQLite file per state dir.

Tables: `instances` (what this state dir started: pid or Ray actor, node, port, status, plan
hash and point), `journal` (every action and its result), `lease` (one row: the holder of the
apply lock) and `meta` (the plan and point last applied). WAL mode, so readers (status, the
gateway) never block the one writer. The lease is taken inside `BEGIN IMMEDIATE`, which
serialises the check-and-write between processes; a holder that died on this host, or whose
lease expired, is taken over.

Integrity (planner.adjuster.state_file): a damaged or emptied file is refused (exit 2), never
recreated. A missing file is a new state dir; read-only opens (`--dry-run`, `status`) of a
missing file write nothing.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from planner.adjuster.state_file import (
    COLUMNS,
    DB_NAME,
    NO_PROCESS,
    REPAIR_FIX,
    SCHEMA,
    SCHEMA_VERSION,
    TABLES,
    InstanceRow,
    connect,
    damaged,
    lenient_text,
    open_checked,
    unwritable,
)
from planner.engines.process import pid_alive
from planner.errors import InputError, LockHeldError
from planner.private import private_dir, private_sqlite

__all__ = [
    "DB_NAME",
    "NO_PROCESS",
    "REPAIR_FIX",
    "SCHEMA_VERSION",
    "TABLES",
    "InstanceRow",
    "Lease",
    "StateStore",
    "damaged",
    "default_state_dir",
    "lenient_text",
    "open_checked",
]


def default_state_dir() -> Path:
    """`$XDG_STATE_HOME/planner`, else `~/.local/state/planner`."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "planner"


def existing_state_dir(state_dir: str | Path | None) -> Path:
    """The state dir a read-only command reads; InputError when it does not exist (a typo
    must not read as "nothing applied", nor leave an empty dir behind)."""
    d = Path(state_dir) if state_dir else default_state_dir()
    if not d.is_dir():
        raise InputError(
            "the state dir does not exist (nothing was applied with it)",
            file=str(d),
            fix="pass the --state-dir that `planner apply` used, or apply a plan first",
        )
    return d


@dataclass
class Lease:
    """The apply lock as held."""

    holder_pid: int
    holder_host: str
    purpose: str
    acquired_at: float
    expires_at: float


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
            self._db = connect(":memory:")  # nothing applied here yet
            self._db.executescript(SCHEMA)
            return
        if not readonly:
            try:
                private_dir(self.dir)
            except OSError as e:
                raise InputError(
                    f"cannot create the state dir: {e.strerror}", file=str(self.dir)
                ) from None
        new = not self.path.exists()
        self._db = open_checked(self.path, readonly=readonly)
        if not readonly:
            private_sqlite(self.path, new=new)  # holds the engines' secrets

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
        return private_dir(self.dir / "logs")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                if self._db.in_transaction:  # SQLITE_FULL has rolled it back already
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.OperationalError as e:
            err = unwritable(self.path, e)
            if err is None:
                raise
            raise err from None

    def _row(self, r: sqlite3.Row) -> InstanceRow:
        keys = r.keys()  # a read-only open of an older file lacks the newer columns
        return InstanceRow(**{c: r[c] for c in COLUMNS if c in keys})

    # ------------------------------------------------------------ instances

    def upsert(self, row: InstanceRow) -> None:
        """Insert or replace the row of `row.id`."""
        row.updated_at = time.time()
        d = asdict(row)
        cols = ", ".join(COLUMNS)
        marks = ", ".join(f":{c}" for c in COLUMNS)
        with self._tx() as db:
            db.execute(f"INSERT OR REPLACE INTO instances ({cols}) VALUES ({marks})", d)

    def update(self, instance_id: str, **changes: object) -> None:
        """Set some columns of one row (KeyError if the row is absent)."""
        bad = [k for k in changes if k not in COLUMNS]
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
            # a process that reused the holder's pid started after the lease was taken
            return pid_alive(lease.holder_pid, running_at=lease.acquired_at)
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
