"""`planner history` (the state dir's journal), `planner logs INSTANCE` (an engine's log), and
what `apply --previous` reads and `apply` keeps (the plan and point in force before it)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import JsonOpt, StateDirOpt, console, print_json
from planner.errors import InputError


def history_cmd(
    state_dir: StateDirOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Lines to show.")] = 50,
    json_out: JsonOpt = False,
) -> None:
    """What happened, oldest first: applies, hops, wakes, sleeps, restarts, with time and reason."""
    from planner.adjuster.state import StateStore, existing_state_dir

    with StateStore(existing_state_dir(state_dir), readonly=True) as state:
        rows = state.journal_entries(limit)
        meta = state.meta()
    if json_out:
        print_json({"point": meta.get("point", ""), "plan": meta.get("plan_path", ""),
                    "plan_sha256": meta.get("plan_sha", ""),
                    "previous": {"point": meta.get("previous_point", ""),
                                 "plan": meta.get("previous_plan_path", "")},
                    "journal": rows})  # fmt: skip
        return
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["ts"]))
        what = f"{r['action']} {r['instance']}".strip()
        where = f" on {r['node']}" if r["node"] else ""
        why = f": {r['detail']}" if r["detail"] else ""
        console.print(f"{when}  {what}{where}  {r['result']}{why}", highlight=False, markup=False)
    if not rows:
        console.print("nothing recorded yet", highlight=False)
    prev, sha = meta.get("previous_point"), meta.get("plan_sha", "")
    before = f"point {prev} of {meta.get('previous_plan_path') or '-'}"
    console.print(
        f"in force: point {meta.get('point') or '-'} of {meta.get('plan_path') or '-'}"
        + (f" (sha256 {sha[:12]})" if sha and meta.get("point") else "")
        + (f"; before it: {before} (`planner apply --previous`)" if prev else ""),
        highlight=False,
        markup=False,
    )


def logs_cmd(
    instance: Annotated[str, typer.Argument(metavar="INSTANCE", help="Instance id (status).")],
    state_dir: StateDirOpt = None,
    lines: Annotated[int, typer.Option("--lines", "-n", min=1, help="Last lines to show.")] = 50,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing what the engine writes.")
    ] = False,
) -> None:
    """The end of an instance's engine log (vLLM's output), from the state dir's record."""
    from planner.adjuster.state import StateStore, existing_state_dir

    with StateStore(existing_state_dir(state_dir), readonly=True) as state:
        rows = {r.id: r for r in state.instances()}
    row = rows.get(instance)
    if row is None:
        raise InputError(
            f"no instance {instance!r} in this state dir", path="INSTANCE",
            fix=f"use one of {sorted(rows)} (`planner status`)",
        )  # fmt: skip
    path = Path(row.log_path)
    if not row.log_path or not path.is_file():
        raise InputError(
            f"the log of {instance} is not on this host ({row.log_path or 'no path recorded'}, "
            f"node {row.node})",
            path="INSTANCE",
            fix=f"run `planner logs {instance}` on node {row.node} with its --state-dir",
        )
    _tail(path, lines, follow)


def _tail(path: Path, lines: int, follow: bool) -> None:
    """Print the last `lines` lines of `path`; with `follow`, what is appended until Ctrl-C."""
    import sys
    from collections import deque

    with path.open("rb") as f:
        for line in deque(f, maxlen=lines):
            sys.stdout.write(line.decode(errors="replace"))
        sys.stdout.flush()
        if not follow:
            return
        try:
            while True:
                chunk = f.read()
                if chunk:
                    sys.stdout.write(chunk.decode(errors="replace"))
                    sys.stdout.flush()
                else:
                    time.sleep(0.5)
        except KeyboardInterrupt:
            return


@dataclass
class Previous:
    """What `apply --previous` restores: a plan file (the original when it still has the
    digest it was applied with, else the copy the state dir kept) and a point."""

    plan_path: Path
    point: str
    sha: str
    what: str  # how `apply --previous` names it before it acts
    inputs: dict[str, Path]  # cluster/models the copy records, found beside the original


def _inputs_beside(copy: Path, original: Path) -> dict[str, Path]:
    """The copy's recorded cluster and models files, relative to the original's folder (the
    copy lives in the state dir, where its relative paths mean nothing)."""
    from planner.schemas import load_plan

    refs = load_plan(copy).inputs
    out = {}
    for key in ("cluster", "models"):
        ref = refs.get(key)
        if ref is not None and ref.path:
            p = Path(ref.path).expanduser()
            out[key] = p if p.is_absolute() else original.parent / p
    return out


def previous_applied(plan_path: Path | None, point: str | None, state_dir: Path | None) -> Previous:
    """The plan and point `apply` recorded as in force before the last apply or `down`
    (--previous)."""
    from planner.adjuster.state import StateStore, existing_state_dir
    from planner.io import sha256_file

    if plan_path is not None or point is not None:
        raise InputError(
            "--previous takes no PLAN or --point (it applies the ones recorded)",
            path="--previous",
            fix="drop PLAN and --point, or drop --previous",
        )
    with StateStore(existing_state_dir(state_dir), readonly=True) as state:
        meta = state.meta()
    prev_plan, prev_point = meta.get("previous_plan_path", ""), meta.get("previous_point", "")
    if not prev_plan or not prev_point:
        raise InputError(
            "no previous apply is recorded in this state dir",
            file=str(state_dir or "the default state dir"),
            fix="apply a plan first; `planner history` lists what was applied",
        )
    sha, copy = meta.get("previous_plan_sha", ""), meta.get("previous_plan_copy", "")
    path = Path(prev_plan)
    same = path.is_file() and (not sha or sha256_file(path) == sha)
    what = f"point {prev_point} of {prev_plan}" + (f" (sha256 {sha[:12]})" if sha else "")
    inputs: dict[str, Path] = {}
    if not same and copy and Path(copy).is_file():
        what += f", from the copy {copy} (the file changed since)"
        path = Path(copy)
        inputs = _inputs_beside(path, Path(prev_plan))
    elif not same:
        raise InputError(
            f"the plan of the previous apply ({prev_plan}) changed or is gone, and no copy of "
            "it was kept",
            file=prev_plan,
            fix="apply the plan you want by name (`planner history` lists what was applied)",
        )
    return Previous(path, prev_point, sha, what, inputs)


_KEPT = ("plan_path", "point", "plan_sha", "plan_copy")  # what `--previous` reads back


def keep_previous(state: Any, before: dict[str, str], plan_path: str, point: str) -> None:
    """Record the plan and point in force before this apply, when it changed them (what
    `apply --previous` returns to; applying it swaps them back, as `cd -` does). After a
    `down` nothing was in force: what `down` kept stays."""
    old_plan, old_point = before.get("plan_path", ""), before.get("point", "")
    if old_plan and old_point and (old_plan, old_point) != (plan_path, point):
        state.set_meta(**{f"previous_{k}": before.get(k, "") for k in _KEPT})


def keep_plan_copy(state: Any, plan_path: Path, sha: str) -> str:
    """A copy of the applied plan file under `<state dir>/plans/<digest>.yaml` (0600; one per
    version): what `apply --previous` reads when the file changed since. Returns its path."""
    from planner.io import atomic_write_bytes
    from planner.private import private_dir

    if not sha:
        return ""
    dest = private_dir(state.dir / "plans") / f"{sha[:16]}.yaml"
    if not dest.exists():
        atomic_write_bytes(dest, Path(plan_path).read_bytes(), 0o600)
    return str(dest)


def register(app: typer.Typer) -> None:
    """Add `planner history` and `planner logs`."""
    app.command("history")(history_cmd)
    app.command("logs")(logs_cmd)
