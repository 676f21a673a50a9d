"""The memory invariant every plan point must satisfy (docs/plan-format.md), checked from the plan alone."""

from __future__ import annotations

from planner.optimizer.perf import default_calib
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Point


def memory_violations(
    point: Point, cluster: Cluster, *, gpu_margin: float = 0.0, host_margin: float = 0.0
) -> list[str]:
    """Every GPU and node where the point does not fit; empty when it does.

    Per GPU: awake memory of the `gpu`-tier instances + the largest awake memory of any
    `host`/`disk` instance + the CUDA contexts the other sleepers keep <= device memory.
    Per node: weights of `host`-tier instances + CPU KV/expert offload <= RAM.
    """
    out: list[str] = []
    gpu_mem = {(n.name, d): g.spec for n in cluster.nodes for d, g in n.gpu_list()}
    awake: dict[tuple[str, int], float] = {}
    sleepers: dict[tuple[str, int], list[float]] = {}
    ram: dict[str, float] = {}
    for inst in point.instances:
        for g in inst.gpus:
            key = (inst.node, g)
            if key not in gpu_mem:
                out.append(f"{inst.id}: GPU {inst.node}:{g} does not exist")
                continue
            if inst.tier == "gpu":
                awake[key] = awake.get(key, 0.0) + inst.memory_gib.total
            else:
                sleepers.setdefault(key, []).append(inst.memory_gib.total)
        host_gib = inst.kv_cpu_offload_gib + inst.expert_cpu_offload_gib
        if inst.tier == "host":
            host_gib += inst.memory_gib.weights * inst.tp  # weights of every rank, GiB
        ram[inst.node] = ram.get(inst.node, 0.0) + host_gib
    for key, spec in sorted(gpu_mem.items()):
        s = sorted(sleepers.get(key, []), reverse=True)
        ctx = default_calib(spec.arch).context_gib  # a sleeping process keeps its CUDA context, GiB
        need = awake.get(key, 0.0) + (s[0] if s else 0.0) + ctx * max(0, len(s) - 1)
        cap = spec.memory_gib * (1 - gpu_margin)
        if need > cap + 1e-6:
            out.append(f"GPU {key[0]}:{key[1]} ({spec.name}) needs {need:.2f} GiB > {cap:.2f} GiB")
    for node in cluster.nodes:
        cap = node.cpu_memory_gib * (1 - host_margin)
        if ram.get(node.name, 0.0) > cap + 1e-6:
            out.append(f"node {node.name} needs {ram[node.name]:.1f} GiB of RAM > {cap:.1f} GiB")
    return out
