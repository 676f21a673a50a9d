"""The state service: what a state dir records (`journal`: the journal and the plan and point
in force; `log_path`: an engine's log) and the state database when something damaged it
(`check`, `export` with instance secrets redacted, `repair`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError


@dataclass(frozen=True)
class Journal:
    """The last lines of a state dir's journal (oldest first) and its records of what is in
    force (`plan_path`, `point`, `plan_sha`, and what was before it)."""

    rows: list[dict[str, Any]]
    meta: dict[str, str]


def journal(state_dir: Path | None, limit: int = 50) -> Journal:
    """What happened, oldest first: applies, hops, wakes, sleeps, restarts."""
    from planner.adjuster.state import StateStore, existing_state_dir

    with StateStore(existing_state_dir(state_dir), readonly=True) as state:
        return Journal(state.journal_entries(limit), state.meta())


def log_path(state_dir: Path | None, instance: str) -> Path:
    """The engine log of `instance`, from the state dir's record; an InputError when the
    instance is unknown or its log is on another host."""
    from planner.adjuster.state import StateStore, existing_state_dir

    with StateStore(existing_state_dir(state_dir), readonly=True) as state:
        rows = {r.id: r for r in state.instances()}
    row = rows.get(instance)
    if row is None:
        raise InputError(
            f"no instance {instance!r} in this state dir",
            path="INSTANCE",
            fix=f"use one of {sorted(rows)} (`planner status`)",
        )
    path = Path(row.log_path)
    if not row.log_path or not path.is_file():
        raise InputError(
            f"the log of {instance} is not on this host ({row.log_path or 'no path recorded'}, "
            f"node {row.node})",
            path="INSTANCE",
            fix=f"run `planner logs {instance}` on node {row.node} with its --state-dir",
        )
    return path


def check(state_dir: Path | None) -> tuple[Path, list[str]]:
    """The state database and its problems ([] when it is whole, or absent)."""
    from planner.adjuster.state_repair import check as problems_of
    from planner.adjuster.state_repair import state_path

    return state_path(state_dir), problems_of(state_dir)


def export(state_dir: Path | None) -> dict[str, Any]:
    """Every readable row of every table (what a repair would keep), instance API keys
    redacted: they stay in the state database."""
    from planner.adjuster.state_repair import export as read_all

    data = read_all(state_dir)
    for row in data["tables"].get("instances", []):
        if row.get("secret"):
            row["secret"] = "(redacted: instance API keys stay in the state DB)"
    return data


def repair(state_dir: Path | None, force: bool = False) -> dict[str, Any]:
    """Rebuild the state database from its readable rows; the damaged file is kept beside it."""
    from planner.adjuster.state_repair import repair as rebuild

    return rebuild(state_dir, force=force)
