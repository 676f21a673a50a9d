"""What every command shares: consoles, JSON output, option types, optional-dependency checks."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from planner.adjuster.backends import BackendKind


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


def state_backend(given: Any, state_dir: Path | None, *, may_switch: bool = False) -> str:
    """The backend a command of `state_dir` uses: the one `planner apply` recorded there
    (status, down, gateway and adjust follow it); `given` (--backend) must agree with it
    (InputError naming both), and decides where nothing was recorded yet (default local).
    `may_switch` (apply): another backend may take over a state dir that runs nothing."""
    from planner.adjuster.state import DB_NAME, StateStore, default_state_dir
    from planner.errors import InputError

    given = getattr(given, "value", given)
    recorded = ""
    d = Path(state_dir) if state_dir else default_state_dir()
    if (d / DB_NAME).is_file():
        with StateStore(d, readonly=True) as st:
            recorded = st.meta().get("backend", "")
            if may_switch and not st.instances():
                recorded = ""
    if given and recorded and given != recorded:
        raise InputError(
            f"this state dir was applied with --backend {recorded}; --backend {given} would "
            "not find its engines",
            file=str(d),
            path="--backend",
            fix=f"drop --backend (it follows the state dir), or pass --backend {recorded}",
        )
    return given or recorded or "local"


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


def open_backend(
    kind: str,
    cluster: Any = None,
    *,
    starts_engines: str | None = None,
    engines: Iterable[str] = (),
) -> Any:
    """The backend `kind` for `cluster` (its device from the cluster file), after checking the
    pip extras it needs (MissingExtraError, exit 2, before anything starts). `starts_engines`:
    the command, when it will start engines: a backend that runs them on this host needs
    the package of each engine kind in `engines` installed here too (default: the default
    kind's)."""
    from planner.adjuster.backends import backend_class, cluster_device, make_backend
    from planner.adjuster.backends.base import BackendFeature

    extra = backend_class(kind).extra
    if extra:
        require_extra(extra, f"--backend {getattr(kind, 'value', kind)}")
    device = cluster_device(cluster)
    be = make_backend(kind, cluster, device)
    here = BackendFeature.PROCESSES in be.features and BackendFeature.MULTI_NODE not in be.features
    if starts_engines and here:
        require_extra(serve_extra(device), starts_engines, engine_modules(engines))
    return be


# What the pip extras of pyproject.toml bring that commands import (module names).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "profile": ("torch",),
    "http": ("aiohttp", "httpx"),
    "serve": ("vllm", "aiohttp", "httpx"),
    "serve-cpu": ("vllm", "torch", "transformers", "tokenizers", "aiohttp", "httpx"),
    "cluster": ("ray",),
}


def require_extra(extra: str, needed_by: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise MissingExtraError (exit 2) unless `modules` (default: all the extra brings) import.

    Called first thing by every command that needs an extra, before it writes or starts
    anything. Looks the modules up without importing them (`planner --help` stays light).
    """
    from planner.errors import MissingExtraError

    missing = [m for m in (modules or EXTRA_MODULES[extra]) if not _importable(m)]
    if missing:
        raise MissingExtraError(needed_by, missing, extra)


def engine_modules(kinds: Iterable[str] = ()) -> tuple[str, ...]:
    """The modules the engines of `kinds` need (each engine's `package`), the default kind's
    when none is given."""
    from planner.engines.base import get_engine
    from planner.engines.kinds import DEFAULT_KIND

    return tuple(dict.fromkeys(get_engine(k).package.module for k in kinds or [DEFAULT_KIND]))


def serve_extra(device: str | None) -> str:
    """The extra that brings the engine: the CPU build of vLLM on `cpu`, else the GPU one."""
    return "serve-cpu" if device == "cpu" else "serve"


def _importable(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


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
