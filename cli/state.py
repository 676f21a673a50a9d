"""`planner state check|export|repair`: the apply state database when something damaged it
(`planner.app.state`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, StateDirOpt, console, print_json

app = typer.Typer(help="Check, save or rebuild the apply state database (state.sqlite).")


@app.command("check")
def check_cmd(state_dir: StateDirOpt = None, json_out: JsonOpt = False) -> None:
    """Say whether the state database is whole; exit 2 naming each problem when it is not."""
    from planner.adjuster.state import REPAIR_FIX
    from planner.app.state import check

    path, problems = check(state_dir)
    if json_out:
        print_json({"file": str(path), "ok": not problems, "problems": problems})
    elif not problems:
        state = "healthy" if path.exists() else "absent (nothing applied yet)"
        console.print(f"ok {path}: {state}", highlight=False, markup=False)
    if problems:
        from planner.errors import InputError

        raise InputError(problems[0], file=str(path), fix=REPAIR_FIX)


@app.command("export")
def export_cmd(
    state_dir: StateDirOpt = None,
    out: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the JSON here; default: stdout.")
    ] = None,
) -> None:
    """Every readable row of every table as JSON (what a repair would keep)."""
    import json

    from planner.app.state import export
    from planner.io import atomic_write_text

    data = export(state_dir)
    if out is None:
        print_json(data)
        return
    atomic_write_text(out, json.dumps(data, indent=2) + "\n")
    n = sum(len(r) for r in data["tables"].values())
    console.print(f"wrote {out}: {n} row(s); unreadable: {data['unreadable'] or 'nothing'}")


@app.command("repair")
def repair_cmd(
    state_dir: StateDirOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild even a healthy database.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Rebuild the state database from its readable rows; the damaged file is kept beside it."""
    from planner.app.state import repair

    rep = repair(state_dir, force=force)
    if json_out:
        print_json(rep)
        return
    console.print(
        f"rebuilt {rep['file']}; the damaged file is {rep['backup']}\n"
        f"kept: {rep['kept']}; unreadable: {rep['unreadable'] or 'nothing'}",
        highlight=False,
        markup=False,
    )
    if rep["unmanaged_logs"]:
        console.print(
            f"warning: no instance record for {', '.join(rep['unmanaged_logs'])} (their logs are "
            "in logs/): such servers may still run; stop them by hand (ps, kill) before "
            "`planner apply`",
            highlight=False,
            markup=False,
        )


def register(root: typer.Typer) -> None:
    """Add `planner state ...`."""
    root.add_typer(app, name="state")
