"""The backends that run engine servers, one module each, looked up by kind.

Adding a backend is one module that defines a class of the `Backend` protocol (base.py) with
a `from_cluster(cluster, *, device)` constructor, `BACKEND: BackendClass = TheClass` at its end
(the type checker checks the class against base.BackendClass), and its line in `_REGISTRY`
below; `--backend` offers it from then on (`BackendKind`) when it runs engines. Modules are
imported on first use, so `planner --help` loads none of them.
"""

from __future__ import annotations

import importlib
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.adjuster.backends.base import Backend, BackendClass
    from planner.schemas.cluster import Cluster

# kind -> (module defining BACKEND, offered by `--backend`)
_REGISTRY: dict[str, tuple[str, bool]] = {
    "local": ("planner.adjuster.backends.local", True),  # processes on this host
    "ray": ("planner.adjuster.backends.ray", True),  # node-agent actors via Ray
    "sim": ("planner.adjuster.backends.sim", False),  # nothing starts: replay and tests
}

# The `--backend` choices (typer reads an Enum). The sim backend is left out: `down` with it
# would mark a real state dir's instances stopped while their processes run on.
BackendKind = Enum(  # type: ignore[misc]
    "BackendKind", {k.upper(): k for k, (_, cli) in _REGISTRY.items() if cli}, type=str
)

_GPU_MARGIN = 0.95  # share of a GPU's memory an engine may plan on


def backend_class(kind: str) -> BackendClass:
    """The backend class registered as `kind` (ValueError naming the known kinds)."""
    kind = getattr(kind, "value", kind)
    if kind not in _REGISTRY:
        raise ValueError(f"unknown backend {kind!r}; known: {', '.join(_REGISTRY)}")
    cls: BackendClass = importlib.import_module(_REGISTRY[kind][0]).BACKEND
    return cls


def backend_kinds() -> tuple[str, ...]:
    """Every registered kind (`BackendKind` holds those the command line offers)."""
    return tuple(_REGISTRY)


def make_backend(kind: str, cluster: Cluster | None = None, device: str | None = None) -> Backend:
    """The backend `kind` for `cluster` (`device` None: the backend finds it out)."""
    return backend_class(kind).from_cluster(cluster, device=device)


def cluster_device(cluster: Cluster | None) -> str | None:
    """`cpu` when every GPU of the cluster is the `cpu` type; else None (detect on the host)."""
    if cluster is None:
        return None
    types = {
        str(g.type if isinstance(g.type, str) else g.type.name).lower()
        for n in cluster.nodes
        for g in n.gpus
    }
    return "cpu" if types == {"cpu"} else None


def gpu_capacity(cluster: Cluster | None) -> dict[tuple[str, int], float] | None:
    """(node, device) -> GiB an engine may use (the spec's memory less a 5% margin); None
    without a cluster."""
    if cluster is None:
        return None
    return {
        (n.name, idx): g.spec.memory_gib * _GPU_MARGIN
        for n in cluster.nodes
        for idx, g in n.gpu_list()
    }
