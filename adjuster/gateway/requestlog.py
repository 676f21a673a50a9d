"""The gateway's request log: SQLite file `<state dir>/requests.sqlite` (WAL: readers never block).

Table `requests`: one row per answered request, the columns of the trace schema
(planner.trace.frame: timestamp in seconds since the epoch, user, session, model, input_tokens,
output_tokens, cached_tokens, served_by, substituted) plus ttft_s, latency_s, switch_wait_s
(measured from the request's arrival at the gateway), status and instance. `model` is the
model the client asked for; `served_by` the stand-in that answered ('' when the model did)
and `substituted` 1 then. A log written before these two columns gains them (empty, 0). A request the engine answered counts
at least one token each way (the trace schema's floor). Table `failures`: every request that
got no answer from an engine (404, 405, 503, 502, 499 client gone), so `read_trace` on the
file sees only real traffic. Rows are queued and written in batches by the gateway's flush
loop, which outlives a full or read-only disk (`RequestLog`): a `kill -9` loses the rows of
the last flush period (`log_flush_s`), at most (docs/operations.md); a damaged file stops the
gateway at start with exit 2 naming it. `RequestLogSource` reads windows of it for
`planner adjust`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from planner.adjuster.gateway.clock import SYSTEM
from planner.errors import InputError
from planner.private import private_dir, private_sqlite

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("planner.gateway")

REQUEST_LOG = "requests.sqlite"


class LogRow(NamedTuple):
    """One `requests` row: its fields are the table's columns, in order."""

    timestamp: float  # arrival, epoch seconds
    user: str
    session: str
    model: str  # asked for
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    ttft_s: float | None
    latency_s: float
    switch_wait_s: float
    status: int
    instance: str
    served_by: str  # the stand-in that answered ("": the model itself)
    substituted: int  # 1 when a stand-in answered


class FailureRow(NamedTuple):
    """One `failures` row: its fields are the table's columns, in order."""

    timestamp: float
    user: str
    session: str
    model: str
    status: int
    latency_s: float
    switch_wait_s: float
    error: str


LOG_COLUMNS = LogRow._fields
_ADDED = {  # columns newer than the first logs: added to an old log's table when opened
    "served_by": "TEXT NOT NULL DEFAULT ''",
    "substituted": "INTEGER NOT NULL DEFAULT 0",
}
FAILURE_COLUMNS = FailureRow._fields


class RequestLog:
    """Batched, thread-safe writer of the SQLite request log that survives its disk.

    Rows wait in a bounded buffer (`max_pending` rows; when full the oldest is dropped and
    counted in `dropped`). A write that fails (disk full, read-only file, a lock) keeps its
    rows for the next flush, counts in `write_failures`, and is logged once per
    `warn_every_s`; the next flush that succeeds says so: writing resumes by itself.
    Retention: rows older than `max_age_s` before the newest, and the oldest beyond
    `max_bytes` of used pages, are deleted at most once per `prune_every_s`.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        max_pending: int = 100_000,
        max_age_s: float = 90 * 86400.0,
        max_bytes: int = 1 << 30,
        warn_every_s: float = 60.0,
        prune_every_s: float = 3600.0,
        clock: Callable[[], float] = SYSTEM.now_s,
    ):
        self.path = Path(path)
        self.clock = clock  # epoch seconds: when a flush runs (warnings, retention)
        self.max_pending = max_pending
        self.max_age_s, self.max_bytes = max_age_s, max_bytes
        self.warn_every_s, self.prune_every_s = warn_every_s, prune_every_s
        self._lock = threading.Lock()
        self._rows: deque[tuple] = deque()
        self._failures: deque[tuple] = deque()
        self.dropped = 0  # rows lost to a full buffer
        self.write_failures = 0  # flushes that failed
        self.written = 0  # rows written
        self.failing_since_s: float | None = None  # first failure of the current outage
        self._warned_s = -math.inf
        self._pruned_s = -math.inf
        private_dir(self.path.parent)
        private_sqlite(self.path)  # who used which model when: private
        self._con = _open(self.path)

    def add(self, row: LogRow) -> None:
        """Queue one `requests` row."""
        self._queue(self._rows, row)

    def add_failure(self, row: FailureRow) -> None:
        """Queue one `failures` row."""
        self._queue(self._failures, row)

    def _queue(self, q: deque[tuple], row: tuple) -> None:
        q.append(row)
        while len(self._rows) + len(self._failures) > self.max_pending:
            # the oldest goes first, whichever table it is for (both start with timestamp)
            old = (
                self._rows
                if not self._failures or (self._rows and self._rows[0][0] <= self._failures[0][0])
                else self._failures
            )
            old.popleft()
            self.dropped += 1

    def pending(self) -> int:
        """Rows waiting for the next flush."""
        return len(self._rows) + len(self._failures)

    def flush(self, now_s: float | None = None) -> bool:
        """Write the queued rows in one transaction; False when the write failed (the rows
        stay queued)."""
        now_s = self.clock() if now_s is None else now_s
        with self._lock:
            rows, fails = list(self._rows), list(self._failures)
            if not rows and not fails:
                return True
            try:
                self._write(rows, fails)
            except sqlite3.Error as e:
                with contextlib.suppress(sqlite3.Error):
                    self._con.rollback()
                self._failed(e, now_s)
                return False
            for _ in rows:  # rows added meanwhile stay queued
                self._rows.popleft()
            for _ in fails:
                self._failures.popleft()
            self.written += len(rows) + len(fails)
            if self.failing_since_s is not None:
                log.warning(
                    "request log %s: writing again after %.0f s of failures (%d rows dropped)",
                    self.path,
                    now_s - self.failing_since_s,
                    self.dropped,
                )
                self.failing_since_s = None
                self._warned_s = -math.inf
            if now_s - self._pruned_s >= self.prune_every_s:
                self._pruned_s = now_s
                with contextlib.suppress(sqlite3.Error):  # retention is retried next time
                    self._prune()
            return True

    def _write(self, rows: list[tuple], fails: list[tuple]) -> None:
        if rows:
            marks = ",".join("?" * len(LOG_COLUMNS))
            self._con.executemany(
                f"INSERT INTO requests ({','.join(LOG_COLUMNS)}) VALUES ({marks})", rows
            )
        if fails:
            marks = ",".join("?" * len(FAILURE_COLUMNS))
            self._con.executemany(
                f"INSERT INTO failures ({','.join(FAILURE_COLUMNS)}) VALUES ({marks})", fails
            )
        self._con.commit()

    def _failed(self, e: sqlite3.Error, now_s: float) -> None:
        self.write_failures += 1
        if self.failing_since_s is None:
            self.failing_since_s = now_s
        if now_s - self._warned_s >= self.warn_every_s:
            self._warned_s = now_s
            log.warning(
                "request log %s: cannot write (%s); %d rows wait (at most %d kept, %d dropped)",
                self.path,
                why_unwritable(e),
                self.pending(),
                self.max_pending,
                self.dropped,
            )

    def _prune(self) -> None:
        """Delete rows older than `max_age_s` before the newest row (the log's own time: a
        gateway that was off for months does not wipe its history), then the oldest while the
        used pages exceed `max_bytes` (freed pages are reused, so the file stops growing)."""
        con = self._con
        newest = con.execute(
            "SELECT MAX(t) FROM (SELECT MAX(timestamp) AS t FROM requests"
            " UNION ALL SELECT MAX(timestamp) FROM failures)"
        ).fetchone()[0]
        if newest is not None:
            for table in ("requests", "failures"):
                con.execute(f"DELETE FROM {table} WHERE timestamp < ?", (newest - self.max_age_s,))
            con.commit()
        for _ in range(20):  # each round deletes a tenth of the rows
            pages, free, size = (
                con.execute(f"PRAGMA {p}").fetchone()[0]
                for p in ("page_count", "freelist_count", "page_size")
            )
            if (pages - free) * size <= self.max_bytes:
                return
            n = con.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
            m = con.execute("SELECT COUNT(*) FROM failures").fetchone()[0]
            if n + m == 0:
                return
            for table, k in (("requests", n), ("failures", m)):
                con.execute(
                    f"DELETE FROM {table} WHERE rowid IN"
                    f" (SELECT rowid FROM {table} ORDER BY timestamp LIMIT ?)",
                    (max(1, k // 10) if k else 0,),
                )
            con.commit()

    def close(self) -> int:
        """Flush what can be written and close; the rows that could not be written (they
        are logged as lost)."""
        self.flush()
        with self._lock:
            lost = len(self._rows) + len(self._failures)
            if lost:
                log.warning("request log %s: %d rows could not be written", self.path, lost)
            self._con.close()
        return lost


def why_unwritable(e: sqlite3.Error) -> str:
    """What a failed write says, in words a user can act on (never "repair": nothing is
    damaged when the disk is full or the file read-only)."""
    text = str(e)
    low = text.lower()
    if "full" in low:
        return "the disk is full; free space and writing resumes by itself"
    if "readonly" in low or "read-only" in low:
        return "the file or its directory is read-only; fix its permissions"
    if "locked" in low or "busy" in low:
        return "another process holds the file locked"
    return text


def _open(path: Path) -> sqlite3.Connection:
    """The log's connection, tables created or upgraded; InputError (exit 2) naming the
    file when it is not a usable SQLite database."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path, check_same_thread=False)
        check = con.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            con.close()
            raise InputError(
                f"the request log is damaged ({check})", file=str(path), fix=_DAMAGED_FIX
            )
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute(_REQUESTS_DDL)
        have = {r[1] for r in con.execute("PRAGMA table_info(requests)")}
        for col, decl in _ADDED.items():
            if col not in have:  # names and declarations are this module's constants
                con.execute(f"ALTER TABLE requests ADD COLUMN {col} {decl}")
        con.execute(_FAILURES_DDL)
        con.commit()
    except sqlite3.DatabaseError as e:
        if isinstance(e, sqlite3.OperationalError) and (
            "full" in str(e).lower() or "readonly" in str(e).lower()
        ):
            raise InputError(
                f"cannot write the request log: {why_unwritable(e)}", file=str(path)
            ) from None
        raise InputError(
            f"the request log is not a readable SQLite database ({e})",
            file=str(path),
            fix=_DAMAGED_FIX,
        ) from None
    except OSError as e:
        raise InputError(f"cannot open the request log: {e.strerror}", file=str(path)) from None
    return con


_DAMAGED_FIX = (
    "move it aside (e.g. `mv requests.sqlite requests.sqlite.bad`): the gateway starts a new "
    "log; `planner adjust` then sees only traffic from then on"
)
_REQUESTS_DDL = (
    "CREATE TABLE IF NOT EXISTS requests (timestamp REAL NOT NULL, user TEXT NOT NULL,"
    " session TEXT NOT NULL, model TEXT NOT NULL, input_tokens INTEGER NOT NULL,"
    " output_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL DEFAULT 0,"
    " ttft_s REAL, latency_s REAL NOT NULL, switch_wait_s REAL NOT NULL DEFAULT 0,"
    " status INTEGER NOT NULL, instance TEXT NOT NULL)"
)
_FAILURES_DDL = (
    "CREATE TABLE IF NOT EXISTS failures (timestamp REAL NOT NULL, user TEXT NOT NULL,"
    " session TEXT NOT NULL, model TEXT NOT NULL, status INTEGER NOT NULL,"
    " latency_s REAL NOT NULL, switch_wait_s REAL NOT NULL, error TEXT NOT NULL)"
)


class RequestLogSource:
    """The request log as `planner adjust` reads it: the requests of a time span, as a trace.

    Timestamps stay seconds since the epoch, the time base of the caller's clock (the hour of
    day is `timestamp mod 86400` either way, as `summarize` reads it). A missing file or
    table is an empty log; a path that is not a file, or a file that is not SQLite, is an
    InputError (exit 2), never an empty log.
    """

    def __init__(self, state_dir: str | Path, model_names: list[str] | None = None):
        self.path = Path(state_dir) / REQUEST_LOG
        self.model_names = model_names

    def _present(self) -> bool:
        """Whether the log exists (a missing one is empty); InputError when its path is
        something else than a file."""
        if not self.path.exists():
            return False
        if not self.path.is_file():
            raise InputError(
                "the request log is not a file",
                file=str(self.path),
                fix="move it away: the gateway makes a new log on its next start",
            )
        return True

    def first_s(self) -> float | None:
        """When the first logged request arrived (None: none yet)."""
        if not self._present():
            return None
        con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT MIN(timestamp) FROM requests").fetchone()
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):  # no request logged yet
                return None
            raise InputError(
                f"the request log cannot be read: {e}",
                file=str(self.path),
                fix="move it away: the gateway makes a new log",
            ) from None
        except sqlite3.DatabaseError as e:  # not SQLite at all
            raise InputError(
                f"the request log is not a database: {e}",
                file=str(self.path),
                fix="move it away: the gateway makes a new log",
            ) from None
        finally:
            con.close()
        return None if row is None or row[0] is None else float(row[0])

    def window(self, start_s: float, end_s: float) -> pd.DataFrame:
        """Requests that arrived in `[start_s, end_s)` (trace schema, epoch seconds); a
        damaged log raises InputError (`planner.trace.request_log_rows`)."""
        from planner.trace.frame import empty_trace, normalize, request_log_rows

        if not self._present():
            return empty_trace()
        raw = request_log_rows(self.path, (start_s, end_s), epoch=True)
        if raw is None or not len(raw):
            return empty_trace()
        return normalize(raw, file=str(self.path), model_names=self.model_names)


__all__ = [
    "FAILURE_COLUMNS",
    "LOG_COLUMNS",
    "REQUEST_LOG",
    "FailureRow",
    "LogRow",
    "RequestLog",
    "RequestLogSource",
]
