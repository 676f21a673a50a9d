"""`planner profile ... --ray`: run the hardware profile on every node of the cluster.

Each node runs a Ray task pinned by the custom resource named after the node (what
`ray start --resources='{"<node>": 1}'` declares, as for the apply backend's node agents);
the task measures that node and returns plain profile data, and the caller writes the
files. Ray is imported inside the functions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from planner.errors import InputError, ProfileError
from planner.schemas.profile import Profile

NODE_RESOURCE = 0.001  # share of a node's custom resource one profiling task holds


def cluster_nodes(cluster_file: Path | None, only: str | None = None) -> list[str]:
    """Node names of cluster.yaml (just `only` when given)."""
    if cluster_file is None:
        raise InputError(
            "--ray needs the cluster", path="--cluster", fix="pass --cluster cluster.yaml"
        )
    from planner.schemas import load_cluster

    names = [n.name for n in load_cluster(cluster_file).nodes]
    if only is not None:
        if only not in names:
            raise InputError(
                f"node {only!r} is not in the cluster",
                file=str(cluster_file),
                path="--node",
                fix=f"use one of {names}",
            )
        return [only]
    return names


def _hardware_task(node: str, device: str, quick: bool) -> list[dict[str, Any]]:
    """Runs on the node: its hardware profile(s) as plain data."""
    import tempfile

    from planner.profiler.hardware_targets import profile_hardware

    profs = profile_hardware(device, node, quick=quick, disk_dir=Path(tempfile.gettempdir()))
    return [p.model_dump(mode="json") for p in profs]


def _ray(address: str | None) -> Any:
    import ray

    if not ray.is_initialized():
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or "auto",
            namespace="planner",
            log_to_driver=False,
            logging_level="ERROR",
        )
    return ray


def hardware_on_nodes(
    nodes: list[str], device: str, *, quick: bool = False, address: str | None = None
) -> list[Profile]:
    """Hardware profiles of every node, measured on the node itself through Ray."""
    ray = _ray(address)
    have = ray.cluster_resources()
    missing = [n for n in nodes if n not in have]
    if missing:
        raise ProfileError(
            f"no Ray node offers the resource(s) {missing}",
            fix="start each node with ray start --resources='{\"<node>\": 1}'",
        )
    task = ray.remote(_hardware_task)
    # one node at a time: nodes sharing a host (tests) must not measure each other's load
    out: list[Profile] = []
    for n in nodes:
        ref = task.options(resources={n: NODE_RESOURCE}, num_cpus=0).remote(n, device, quick)
        out.extend(Profile.model_validate(d) for d in ray.get(ref))
    return out


def engine_on_node(node: str, *, address: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """`engine_bench.run_node` executed on `node` through Ray (pinned by its resource)."""
    from planner.profiler.engine_bench import run_node

    ray = _ray(address)
    if node not in ray.cluster_resources():
        raise ProfileError(
            f"no Ray node offers the resource {node!r}",
            fix=f"start that node with ray start --resources='{{\"{node}\": 1}}'",
        )
    task = ray.remote(run_node).options(resources={node: NODE_RESOURCE}, num_cpus=0)
    return ray.get(task.remote(node=node, **kwargs))
