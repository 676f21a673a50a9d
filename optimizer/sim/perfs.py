"""Point -> per-instance performance: the one place that maps plan instances to the perf model."""

from __future__ import annotations

from collections.abc import Mapping

from planner.optimizer.perf import Calib, InstancePerf, instance_perf
from planner.schemas.cluster import Cluster, GpuGroup
from planner.schemas.models import Models
from planner.schemas.plan import Instance, Point


def gpu_group(cluster: Cluster, node: str, device: int | None) -> GpuGroup:
    """The GPU group holding `device` on `node` (the node's first group when None)."""
    n = cluster.node(node)
    for idx, group in n.gpu_list():
        if device is None or idx == device:
            return group
    raise KeyError(f"GPU {device} on node {node}")


def perf_for_instance(
    inst: Instance,
    cluster: Cluster,
    models: Models,
    calib_by_gpu: Mapping[str, Calib] | None = None,
) -> InstancePerf:
    """InstancePerf of one plan instance: its model variant, GPU type, TP and engine args.

    The KV cache is the plan's `memory_gib.kv` (per GPU); the rest follows the perf model.
    """
    entry = models.model(inst.model)
    variant = entry.variant(inst.variant)
    group = gpu_group(cluster, inst.node, inst.gpus[0] if inst.gpus else None)
    gpu = group.spec
    eng = inst.engine
    return instance_perf(
        entry.arch,
        variant.quantization,
        gpu,
        inst.tp,
        kv_cache_dtype=eng.kv_cache_dtype,
        gpu_memory_utilization=eng.gpu_memory_utilization,
        max_model_len=eng.max_model_len,
        max_num_seqs=eng.max_num_seqs,
        max_num_batched_tokens=eng.max_num_batched_tokens,
        kv_gib=inst.memory_gib.kv,
        cpu_offload_gib=inst.expert_cpu_offload_gib,
        interconnect=group.interconnect,
        disk_read_gbps=cluster.node(inst.node).disk_read_gbps,
        calib=(calib_by_gpu or {}).get(gpu.name),
    )


def perfs_for_point(
    point: Point,
    cluster: Cluster,
    models: Models,
    calib_by_gpu: Mapping[str, Calib] | None = None,
) -> dict[str, InstancePerf]:
    """instance id -> InstancePerf for every instance of `point` (calibration per GPU name)."""
    return {i.id: perf_for_instance(i, cluster, models, calib_by_gpu) for i in point.instances}
