"""Is this host the plan's node? The local backend's check before `apply` starts anything.

The host's GPUs (catalog type per device, from NVML; none: the `cpu` device) are compared
with the node of the cluster file that the point places its instances on: every GPU type the
node lists must be on the host, at least as many of each. A node of `cpu` devices runs on any
host (the CPU build of vLLM). Pure: the caller discovers the host.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from planner.schemas.cluster import Node


@dataclass(frozen=True)
class HostGpus:
    """This host's GPUs: the catalog type of each (its NVML name where the catalog has none)."""

    types: tuple[str, ...] = ()

    def describe(self) -> str:
        """`cpu (no GPU)`, or `2 x H200-SXM` (types by count, in order)."""
        if not self.types:
            return "cpu (no GPU)"
        return ", ".join(f"{n} x {t}" for t, n in Counter(self.types).items())


def node_gpu_types(node: Node) -> Counter[str]:
    """GPU count by catalog type of a cluster node (`cpu` devices included)."""
    out: Counter[str] = Counter()
    for g in node.gpus:
        out[g.spec.name] += g.count
    return out


def describe_node(node: Node) -> str:
    """`4 x A100-80GB-SXM` (or `cpu`) for a message."""
    types = node_gpu_types(node)
    return ", ".join(f"{n} x {t}" for t, n in types.items()) or "no GPU"


def host_mismatch(node: Node, host: HostGpus) -> str | None:
    """Why this host cannot be `node` (a message naming both), or None when it can."""
    want = node_gpu_types(node)
    want.pop("cpu", None)
    if not want:
        return None  # the CPU build serves anywhere
    have = Counter(host.types)
    missing = {t: n - have[t] for t, n in want.items() if have[t] < n}
    if not missing:
        return None
    return (
        f"this host has {host.describe()}, but the plan's node {node.name!r} has "
        f"{describe_node(node)}"
    )
