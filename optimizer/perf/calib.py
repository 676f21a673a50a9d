"""Efficiency factors of the perf model: spec-sheet defaults per GPU generation, or fitted ones.

A profile (planner.schemas.profile.Profile) carries fitted factors in `calibration`; those
replace the defaults field by field. Nothing here reads files.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class Calib:
    """Achieved/peak factors and fixed costs of one GPU type."""

    compute_efficiency: float = 0.7  # achieved / peak dense tensor FLOP/s on large GEMMs
    bandwidth_efficiency: float = 0.8  # achieved / peak memory bandwidth when streaming weights
    attn_efficiency: float = 0.5  # achieved / peak FLOP/s of attention kernels
    step_overhead_s: float = 0.002  # scheduler + launches + sampling per engine step, s
    prefill_overhead_s: float = 0.01  # per request: tokenize, schedule, detokenize, s
    engine_init_s: float = 25.0  # cold start minus weight loading (imports, compile, graphs), s
    h2d_gbps: float = 21.0  # pinned host->device copy when waking (level 1), GB/s
    d2h_gbps: float = 21.0  # device->host copy when sleeping (level 1), GB/s
    disk_read_gbps: float = 3.0  # checkpoint read from local NVMe, cold page cache, GB/s
    loader_gbps: float = 5.0  # safetensors mmap -> tensors -> GPU copy, CPU-bound, GB/s
    wake_fixed_s: float = 0.2  # wake_up call + KV re-allocation, s
    sleep_fixed_s: float = 0.1  # sleep call bookkeeping, s
    reload_fixed_s: float = 1.0  # level-2 wake: re-open the checkpoint, re-init buffers, s
    link_efficiency: float = 0.6  # achieved / peak GPU<->GPU link rate in all-reduce
    link_latency_s: float = 15e-6  # one all-reduce launch + sync over the link, s
    context_gib: float = 0.5  # CUDA context + non-torch memory a process holds per GPU, GiB
    cuda_graph_gib: float = 0.5  # captured CUDA graphs per GPU, GiB


# Defaults by GPU generation. Bandwidth 0.8: aiconfigurator's mem_bw_empirical_scaling_factor.
# H2D 21 GB/s: vLLM's published sleep-mode wake rate on A100 (PCIe 4); PCIe 5 doubles the link.
_ARCH_DEFAULTS: dict[str, dict[str, float]] = {
    "ampere": dict(compute_efficiency=0.7, bandwidth_efficiency=0.8),
    "ada": dict(compute_efficiency=0.6, bandwidth_efficiency=0.8),
    "hopper": dict(compute_efficiency=0.6, bandwidth_efficiency=0.8, h2d_gbps=40.0, d2h_gbps=40.0,
                   step_overhead_s=0.0025),
    "blackwell": dict(compute_efficiency=0.6, bandwidth_efficiency=0.8, h2d_gbps=40.0, d2h_gbps=40.0),
    # CPU build of vLLM: no graphs, no sleep mode, slow start (imports + warm-up, ENVIRONMENT.md).
    "cpu": dict(compute_efficiency=0.3, bandwidth_efficiency=0.6, attn_efficiency=0.2,
                step_overhead_s=0.01, engine_init_s=55.0, h2d_gbps=5.0, d2h_gbps=5.0,
                context_gib=0.0, cuda_graph_gib=0.0, wake_fixed_s=0.0, link_latency_s=50e-6),
}


def default_calib(arch: str) -> Calib:
    """Spec-sheet defaults of a GPU generation (`GpuSpec.arch`)."""
    return Calib(**_ARCH_DEFAULTS.get(arch, {}))


def calib_from_profile(profile: Any, base: Calib | None = None) -> Calib:
    """Defaults overlaid with every `profile.calibration` field that is set.

    `base` defaults to the generation of the profile's GPU type (catalog lookup).
    """
    if base is None:
        from planner.catalog.gpus import resolve_gpu

        try:
            base = default_calib(resolve_gpu(profile.gpu_type).arch)
        except ValueError:
            base = Calib()
    cal = profile.calibration
    names = {f.name for f in fields(Calib)}
    upd = {k: float(v) for k, v in cal.model_dump().items() if v is not None and k in names}
    return replace(base, **upd)
