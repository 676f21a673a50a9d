"""`planner history` (the state dir's journal), `planner logs INSTANCE` (an engine's log), and
what `apply --previous` reads and `apply` keeps (the plan and point in force before it)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, StateDirOpt, console, print_json


def history_cmd(
    state_dir: StateDirOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Lines to show.")] = 50,
    json_out: JsonOpt = False,
) -> None:
    """What happened, oldest first: applies, hops, wakes, sleeps, restarts, with time and reason."""
    from planner.app.state import journal

    done = journal(state_dir, limit)
    rows, meta = done.rows, done.meta
    if json_out:
        print_json(
            {
                "point": meta.get("point", ""),
                "plan": meta.get("plan_path", ""),
                "plan_sha256": meta.get("plan_sha", ""),
                "previous": {
                    "point": meta.get("previous_point", ""),
                    "plan": meta.get("previous_plan_path", ""),
                },
                "journal": rows,
            }
        )
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
    from planner.app.state import log_path

    _tail(log_path(state_dir, instance), lines, follow)


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


def register(app: typer.Typer) -> None:
    """Add `planner history` and `planner logs`."""
    app.command("history")(history_cmd)
    app.command("logs")(logs_cmd)
