"""What every command shares: consoles, JSON output, option types, optional-dependency checks."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from planner.adjuster.backends import BackendKind
from planner.app.backends import EXTRA_MODULES as EXTRA_MODULES  # the commands use them from here
from planner.app.backends import engine_modules as engine_modules
from planner.app.backends import open_backend as open_backend
from planner.app.backends import require_extra as require_extra
from planner.app.backends import serve_extra as serve_extra
from planner.app.backends import state_backend as state_backend


def _stdout_width() -> int | None:
    """At a terminal rich reads its width (COLUMNS wins when set). In a pipe or a file rich
    would assume 80 columns and cut tables; there, render wide enough that nothing is cut."""
    if "COLUMNS" in os.environ or sys.stdout.isatty():
        return None
    return 240


console = Console(width=_stdout_width())
err_console = Console(stderr=True)

# A plain flag: no `<bool>` metavar in help (`--json` takes no value).
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print machine-readable JSON on stdout.", metavar="")
]
SeedOpt = Annotated[
    int, typer.Option("--seed", help="Random seed; same inputs and seed, same output.")
]

StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir", help="State dir (SQLite state, logs); default $XDG_STATE_HOME/planner."
    ),
]
# The one `--backend` option of apply, status, down, gateway and adjust.
BackendOpt = Annotated[
    BackendKind | None,
    typer.Option(
        "--backend",
        help="local: processes on this host; ray: node actors via Ray. Default: the one "
        "`planner apply` recorded in the state dir, else local.",
    ),
]


PlanArg = Annotated[Path, typer.Argument(metavar="PLAN", help="plan.yaml")]
PointOpt = Annotated[
    str | None, typer.Option("--point", help="Point of the plan; default: its selected one.")
]
# The inputs a plan records, overridden by a flag (apply, adjust, gateway, evaluate, explain).
PlanClusterOpt = Annotated[
    Path | None, typer.Option("--cluster", help="cluster.yaml; default: plan.inputs.cluster.")
]
PlanModelsOpt = Annotated[
    Path | None, typer.Option("--models", help="models.yaml; default: plan.inputs.models.")
]
PlanSloOpt = Annotated[
    Path | None, typer.Option("--slo", help="slo.yaml; default: plan.inputs.slo.")
]
ProfilesOpt = Annotated[
    Path | None, typer.Option("--profiles", help="Profile directory (calibration).")
]


def print_error(message: str) -> None:
    """`error: MESSAGE` on stderr; the message is escaped (it holds brackets: planner[serve])."""
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """JSON on stdout, nothing else (scripts parse it)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=_default) + "\n")
    sys.stdout.flush()


def _default(o: Any) -> Any:
    if hasattr(o, "model_dump"):
        return o.model_dump()
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
