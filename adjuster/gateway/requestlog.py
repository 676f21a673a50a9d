"""The gateway's request log: SQLite file `<state dir>/requests.sqlite` (WAL: readers never block).

Table `requests`: one row per answered request, the columns of the trace schema
(planner.trace: timestamp in seconds since the epoch, user, session, model, input_tokens,
output_tokens, cached_tokens, served_by, substituted) plus ttft_s, latency_s, switch_wait_s
(measured from the request's arrival at the gateway), status and instance. `model` is the
model the client asked for; `served_by` the stand-in that answered ('' when the model did)
and `substituted` 1 then. A log written before these two columns gains them (empty, 0). A request the engine answered counts
at least one token each way (the trace schema's floor). Table `failures`: every request that
got no answer from an engine (404, 405, 503, 502, 499 client gone), so `read_trace` on the
file sees only real traffic. Rows are queued and written in batches by the gateway's flush
loop; `RequestLogSource` reads windows of it for `planner adjust`.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pandas as pd

from planner.private import private_dir, private_sqlite

REQUEST_LOG = "requests.sqlite"
LOG_COLUMNS = (
    "timestamp",
    "user",
    "session",
    "model",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "ttft_s",
    "latency_s",
    "switch_wait_s",
    "status",
    "instance",
    "served_by",
    "substituted",
)
_ADDED = {  # columns newer than the first logs: added to an old log's table when opened
    "served_by": "TEXT NOT NULL DEFAULT ''",
    "substituted": "INTEGER NOT NULL DEFAULT 0",
}
FAILURE_COLUMNS = (
    "timestamp",
    "user",
    "session",
    "model",
    "status",
    "latency_s",
    "switch_wait_s",
    "error",
)


class RequestLog:
    """Batched, thread-safe writer of the SQLite request log."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        private_dir(self.path.parent)
        self._lock = threading.Lock()
        self._rows: list[tuple] = []
        self._failures: list[tuple] = []
        private_sqlite(self.path)  # who used which model when: private
        self._con = sqlite3.connect(self.path, check_same_thread=False)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=NORMAL")
        self._con.execute(
            "CREATE TABLE IF NOT EXISTS requests (timestamp REAL NOT NULL, user TEXT NOT NULL,"
            " session TEXT NOT NULL, model TEXT NOT NULL, input_tokens INTEGER NOT NULL,"
            " output_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL DEFAULT 0,"
            " ttft_s REAL, latency_s REAL NOT NULL, switch_wait_s REAL NOT NULL DEFAULT 0,"
            " status INTEGER NOT NULL, instance TEXT NOT NULL)"
        )
        have = {r[1] for r in self._con.execute("PRAGMA table_info(requests)")}
        for col, decl in _ADDED.items():
            if col not in have:  # names and declarations are this module's constants
                self._con.execute(f"ALTER TABLE requests ADD COLUMN {col} {decl}")
        self._con.execute(
            "CREATE TABLE IF NOT EXISTS failures (timestamp REAL NOT NULL, user TEXT NOT NULL,"
            " session TEXT NOT NULL, model TEXT NOT NULL, status INTEGER NOT NULL,"
            " latency_s REAL NOT NULL, switch_wait_s REAL NOT NULL, error TEXT NOT NULL)"
        )
        self._con.commit()

    def add(self, row: tuple) -> None:
        """Queue one `requests` row (LOG_COLUMNS order)."""
        self._rows.append(row)

    def add_failure(self, row: tuple) -> None:
        """Queue one `failures` row (FAILURE_COLUMNS order)."""
        self._failures.append(row)

    def pending(self) -> bool:
        """Whether rows wait for the next flush."""
        return bool(self._rows or self._failures)

    def flush(self) -> None:
        """Write the queued rows in one transaction."""
        with self._lock:
            rows, self._rows = self._rows, []
            fails, self._failures = self._failures, []
            if not rows and not fails:
                return
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

    def close(self) -> None:
        """Flush and close."""
        self.flush()
        with self._lock:
            self._con.close()


class RequestLogSource:
    """The request log as `planner adjust` reads it: the requests of a time span, as a trace.

    Timestamps stay seconds since the epoch, the time base of the caller's clock (the hour of
    day is `timestamp mod 86400` either way, as `summarize` reads it). A missing file or
    table is an empty log.
    """

    def __init__(self, state_dir: str | Path, model_names: list[str] | None = None):
        self.path = Path(state_dir) / REQUEST_LOG
        self.model_names = model_names

    def first_s(self) -> float | None:
        """When the first logged request arrived (None: none yet)."""
        if not self.path.is_file():
            return None
        con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT MIN(timestamp) FROM requests").fetchone()
        except sqlite3.OperationalError:  # no table yet
            return None
        finally:
            con.close()
        return None if row is None or row[0] is None else float(row[0])

    def window(self, start_s: float, end_s: float) -> pd.DataFrame:
        """Requests that arrived in `[start_s, end_s)` (trace schema, epoch seconds); a
        damaged log raises InputError (`planner.trace.request_log_rows`)."""
        from planner.trace import empty_trace, normalize, request_log_rows

        if not self.path.is_file():
            return empty_trace()
        raw = request_log_rows(self.path, (start_s, end_s), epoch=True)
        if raw is None or not len(raw):
            return empty_trace()
        return normalize(raw, file=str(self.path), model_names=self.model_names)


__all__ = ["FAILURE_COLUMNS", "LOG_COLUMNS", "REQUEST_LOG", "RequestLog", "RequestLogSource"]
