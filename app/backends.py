"""Which backend a command of a state dir uses and what it needs installed: the backend
`planner apply` recorded there, opened after a check of the pip extras it needs (a
MissingExtraError, exit 2, before anything starts), for every command and the adjuster's
setup alike."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.adjuster.backends.base import Backend
    from planner.schemas.cluster import Cluster


def state_backend(given: str | None, state_dir: Path | None, *, may_switch: bool = False) -> str:
    """The backend a command of `state_dir` uses: the one `planner apply` recorded there
    (status, down, gateway and adjust follow it); `given` (--backend) must agree with it
    (InputError naming both), and decides where nothing was recorded yet (default local).
    `may_switch` (apply): another backend may take over a state dir that runs nothing."""
    from planner.adjuster.state import DB_NAME, StateStore, default_state_dir
    from planner.errors import InputError

    given = str(getattr(given, "value", given) or "") or None  # a BackendKind: its name
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


def open_backend(
    kind: str,
    cluster: Cluster | None = None,
    *,
    starts_engines: str | None = None,
    engines: Iterable[str] = (),
) -> Backend:
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
    be: Backend = make_backend(kind, cluster, device)
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
