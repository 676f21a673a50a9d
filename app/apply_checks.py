"""What `planner apply` checks before it acts, and where: this host against the plan's
node, the ports (moved by `--port-base` or the cluster's `ports:`, held by whom), and the
state rows `status` makes true (`planner.adjuster.running.settle`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def placed(
    plan: Any, cluster: Any, port_base: int | None, state_dir: Path | None, file: str
) -> tuple[Any, int | None]:
    """The plan with its ports where this state dir runs them (`place_ports`): at
    `port_base`, else the base the last apply recorded, else the cluster's `ports:`."""
    from planner.adjuster.ports import place_ports
    from planner.adjuster.state import StateStore

    if port_base is None:
        with StateStore(state_dir, readonly=True) as st:
            recorded = st.meta().get("port_base", "")
        port_base = int(recorded) if recorded.isdigit() else None
    return place_ports(plan, cluster, port_base, file=file), port_base


def host_gpus() -> Any:
    """This host's GPUs (`HostGpus`): NVML's, else nvidia-smi's names; none: the cpu device."""
    from planner.adjuster.hostcheck import HostGpus
    from planner.gpu_discovery import discover_gpus

    return HostGpus(tuple(g.gpu_type or g.name for g in discover_gpus().gpus))


def check_host(plan: Any, point: str | None, node: str | None, cluster: Any, file: str) -> None:
    """The local backend runs the point on this host: refuse (exit 2) a point whose node has
    GPUs this host lacks, naming both, unless `--node NAME` says which node this host is."""
    from planner.adjuster.hostcheck import host_mismatch
    from planner.errors import InputError

    nodes = sorted({i.node for i in plan.point(point).instances})
    if node is not None or len(nodes) != 1:
        return  # --node: the user's word; several nodes: node_share asked for --node
    why = host_mismatch(cluster.node(nodes[0]), host_gpus())
    if why:
        raise InputError(
            why,
            file=file,
            path="--node",
            fix=f"run `planner apply` on node {nodes[0]!r}, or pass --node {nodes[0]} if this "
            "host is that node; --backend ray reaches the other nodes",
        )


def port_lookup(be: Any) -> Any:
    """(node, port) -> who listens there, for a backend that runs servers on this host (its
    ports are this host's); None for one that reaches other nodes, or starts nothing."""
    from planner.adjuster.backends.base import BackendFeature

    if BackendFeature.MULTI_NODE in be.features or BackendFeature.PROCESSES not in be.features:
        return None
    from planner.engines.ports import port_holder

    return lambda node, port: port_holder(port)


def settle_rows(state_dir: Path | None, be: Any) -> None:
    """Write the real state of rows an interrupted apply left (`settle`), when the state
    file exists, is writable and no apply holds its lease; else `status` only reads."""
    import sqlite3

    from planner.adjuster.apply import settle
    from planner.adjuster.state import DB_NAME, StateStore, default_state_dir
    from planner.errors import PlannerError

    if not ((state_dir or default_state_dir()) / DB_NAME).is_file():
        return
    try:
        with StateStore(state_dir) as state, state.lease(purpose="status", ttl_s=120.0):
            settle(state, be)
    except (PlannerError, sqlite3.Error, OSError):
        return  # an apply at work, or a read-only state dir: show what is recorded
