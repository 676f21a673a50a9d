"""Performance model of one vLLM instance: memory, step time, steady state, switch costs.

Pure: architecture + quantization + GPU spec + engine args + efficiency factors in,
`InstancePerf` out. `instance_perf` is cached per argument tuple (all arguments hashable).
"""

from __future__ import annotations

from functools import lru_cache

from planner.catalog.gpus import GpuSpec
from planner.catalog.models import ModelArch
from planner.engines.base import EntryPoint, get_engine
from planner.engines.kinds import DEFAULT_KIND  # the optimizer plans for the default engine
from planner.optimizer.perf.calib import Calib, calib_from_profile, default_calib, for_model
from planner.optimizer.perf.closedloop import (
    BURST_SHARE,
    CHAIN_SHARE,
    benchmark_loop,
    closed_loop,
    steady_state,
)
from planner.optimizer.perf.latency import build_step_model
from planner.optimizer.perf.load import checkpoint_read_s, load_times
from planner.optimizer.perf.memory import (
    activation_bytes,
    kv_bytes_per_token,
    weight_parts_bytes,
    weights_bytes,
    weights_bytes_per_gpu,
)
from planner.optimizer.perf.phases import decode_step_s, prefill_s
from planner.optimizer.perf.types import InstancePerf, StepModel
from planner.units import GIB

__all__ = [
    "BURST_SHARE",
    "CHAIN_SHARE",
    "Calib",
    "InstancePerf",
    "StepModel",
    "activation_bytes",
    "benchmark_loop",
    "calib_from_profile",
    "checkpoint_read_s",
    "closed_loop",
    "decode_step_s",
    "default_calib",
    "instance_perf",
    "kv_bytes_per_token",
    "prefill_s",
    "steady_state",
    "weight_parts_bytes",
    "weights_bytes",
    "weights_bytes_per_gpu",
]

# KV bytes per token of sliding-window models depend on the context; memory and step
# coefficients use this context (tokens) when max_model_len is longer.
REF_CONTEXT_TOKENS = 4096


def instance_perf(
    arch: ModelArch,
    quantization: str,
    gpu: GpuSpec,
    tp: int = 1,
    *,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    entry_point: EntryPoint = "serve",
    kv_gib: float | None = None,
    cpu_offload_gib: float = 0.0,
    interconnect: str = "pcie",
    disk_read_gbps: float | None = None,
    calib: Calib | None = None,
) -> InstancePerf:
    """Memory, step-time model and switch costs of one instance on `tp` GPUs of type `gpu`.

    KV cache per GPU is `kv_gib` when given, else what vLLM would allocate:
    gpu_memory_utilization * memory - weights - (activation peak + CUDA graphs + context).
    A negative remainder gives kv 0 and max_kv_tokens 0; `InstancePerf.fits` is False unless
    the cache holds one max_model_len sequence (vLLM refuses to start otherwise).
    `max_num_seqs` / `max_num_batched_tokens` left None are what vLLM picks for this GPU and
    `entry_point` (`Engine.batch_defaults`).
    """
    seqs, chunk = get_engine(DEFAULT_KIND).batch_defaults(gpu, int(tp), entry_point)
    return _instance_perf(
        arch,
        quantization,
        gpu,
        int(tp),
        kv_cache_dtype,
        float(gpu_memory_utilization),
        max_model_len,
        int(seqs if max_num_seqs is None else max_num_seqs),
        int(chunk if max_num_batched_tokens is None else max_num_batched_tokens),
        None if kv_gib is None else float(kv_gib),
        float(cpu_offload_gib),
        interconnect,
        disk_read_gbps,
        calib,
    )


@lru_cache(maxsize=65536)
def _instance_perf(
    arch: ModelArch,
    quantization: str,
    gpu: GpuSpec,
    tp: int,
    kv_cache_dtype: str,
    util: float,
    max_model_len: int | None,
    max_num_seqs: int,
    chunk_tokens: int,
    kv_gib: float | None,
    cpu_offload_gib: float,
    interconnect: str,
    disk_read_gbps: float | None,
    calib: Calib | None,
) -> InstancePerf:
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    cal = for_model(calib or default_calib(gpu.arch), arch.name)  # a model's own factors
    if gpu.arch == "cpu" and kv_cache_dtype == "auto":
        kv_cache_dtype = "float32"  # the CPU build serves in float32 (planner.engines.vllm)
    mml = max_model_len or min(arch.max_position_embeddings, 32768)  # tokens
    ref_ctx = min(mml, REF_CONTEXT_TOKENS)  # tokens
    w_gpu = weights_bytes_per_gpu(arch, quantization, tp)  # bytes on each GPU before offload
    offload = min(cpu_offload_gib * GIB, w_gpu)  # bytes kept in host RAM per GPU
    w_res = w_gpu - offload  # bytes resident on each GPU
    act = activation_bytes(arch, tp, chunk_tokens, max_num_seqs)  # bytes
    nccl = cal.nccl_gib if tp > 1 else 0.0  # GiB
    overhead = act + (cal.cuda_graph_gib + cal.context_gib + nccl) * GIB  # bytes per GPU
    if kv_gib is None:
        kv = max(0.0, util * gpu.memory_gib * GIB - w_res - overhead)  # bytes per GPU
    else:
        kv = max(0.0, kv_gib * GIB)
    kv_tok_gpu = kv_bytes_per_token(arch, kv_cache_dtype, ref_ctx, tp=tp)  # bytes/token/GPU
    max_kv = int(kv // kv_tok_gpu)
    step = build_step_model(
        arch,
        quantization,
        gpu,
        tp,
        cal,
        kv_cache_dtype=kv_cache_dtype,
        ref_context_tokens=ref_ctx,
        cpu_offload_gib=cpu_offload_gib,
        interconnect=interconnect,
        # vLLM's max_cudagraph_capture_size: min(2 max_num_seqs, 512, max_num_batched_tokens)
        graph_max_tokens=min(2 * max_num_seqs, 512, chunk_tokens),
        ref_batch_tokens=chunk_tokens,
    )
    loads = load_times(weights_bytes(arch, quantization), w_res, gpu, cal, disk_read_gbps)
    return InstancePerf(
        weights_gib_per_gpu=w_res / GIB,
        kv_gib_per_gpu=kv / GIB,
        overhead_gib_per_gpu=overhead / GIB,
        context_gib_per_gpu=cal.context_gib,
        kv_bytes_per_token=kv_bytes_per_token(arch, kv_cache_dtype, ref_ctx),
        max_kv_tokens=max_kv,
        max_num_seqs=max_num_seqs,
        chunk_tokens=chunk_tokens,
        step=step,
        cold_start_s=loads["cold_start_s"],
        wake_host_s=loads["wake_host_s"],
        wake_disk_s=loads["wake_disk_s"],
        sleep_s=loads["sleep_s"],
        weights_host_gib=w_res * tp / GIB,
        prefill_overhead_s=cal.prefill_overhead_s,
        prompt_s_per_token=cal.prompt_s_per_token,
        cpu_offload_gib=offload / GIB,
        max_model_len=mml,
        step_jitter_cv=cal.step_jitter_cv,
        busy_prefill_overhead_s=cal.busy_prefill_overhead_s,
        idle_wake_curve=cal.idle_wake_curve,
    )
