"""The decision journal of `planner adjust`: table `adjust_decisions` in the state store's
SQLite file (`state.sqlite`, WAL like the rest of it).

One row per decision with the policy's state after it (JSON), the action, its one-line
reason and its full reasons (JSON). The last row of the same plan (dry runs aside) is the
state the next tick starts from.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from planner.adjuster.policy_types import AdjustState, Decision
from planner.private import private_dir, private_sqlite

STATE_DB = "state.sqlite"  # the state store's file (adjuster/state.py DB_NAME)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS adjust_decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    plan_sha TEXT NOT NULL,
    action TEXT NOT NULL,
    point_from TEXT NOT NULL,
    point_to TEXT NOT NULL,
    reason TEXT NOT NULL,
    dry_run INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    reasons TEXT NOT NULL
)
"""


class DecisionLog:
    """The `adjust_decisions` table beside the apply state."""

    def __init__(self, state_dir: str | Path):
        self.path = Path(state_dir) / STATE_DB
        private_dir(self.path.parent)
        new = not self.path.exists()
        self._db = sqlite3.connect(self.path, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        private_sqlite(self.path, new=new)
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, fast
        self._db.execute(_SCHEMA)
        self._db.commit()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> DecisionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def last_state(self, plan_sha: str) -> AdjustState | None:
        """The policy state after the last decision taken for this plan, or None."""
        row = self._db.execute(
            "SELECT state FROM adjust_decisions WHERE plan_sha = ? AND dry_run = 0 ORDER BY seq DESC LIMIT 1",
            (plan_sha,),
        ).fetchone()
        return AdjustState.model_validate_json(row[0]) if row else None

    def record(
        self, ts: float, plan_sha: str, state: AdjustState, action: Decision, *, dry_run: bool
    ) -> int:
        """Append one decision; returns its sequence number."""
        cur = self._db.execute(
            "INSERT INTO adjust_decisions (ts, plan_sha, action, point_from, point_to, reason, dry_run, state, reasons)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                ts,
                plan_sha,
                action.kind,
                action.from_point,
                action.point,
                action.reason,
                int(dry_run),
                state.model_dump_json(),
                json.dumps(action.reasons, default=str),
            ),
        )
        self._db.commit()
        return int(cur.lastrowid or 0)

    def entries(self, limit: int = 50) -> list[dict[str, Any]]:
        """The last decisions, oldest first."""
        rows = self._db.execute(
            "SELECT seq, ts, action, point_from, point_to, reason, dry_run FROM adjust_decisions"
            " ORDER BY seq DESC LIMIT ?",
            (limit,),
        ).fetchall()
        keys = ("seq", "ts", "action", "from", "to", "reason", "dry_run")
        return [dict(zip(keys, r, strict=True)) for r in reversed(rows)]


__all__ = ["DecisionLog"]
