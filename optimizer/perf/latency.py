"""Step time of a continuous-batching engine.

`build_step_model` turns a GPU spec, an architecture and efficiency factors into the
coefficients of `StepModel`; the simulator calls `StepModel.time_s` for every step.
"""

from __future__ import annotations

from functools import lru_cache

from planner.catalog.gpus import GpuSpec
from planner.catalog.models import ModelArch, param_counts
from planner.optimizer.perf.calib import Calib, default_calib
from planner.optimizer.perf.kernels import Source, borrowed_factor, gemm_s, worst_source
from planner.optimizer.perf.memory import (
    EXPERT_ONLY_QUANTS,
    W4A16_QUANTS,
    bytes_per_param,
    kv_bytes_per_token,
    weight_parts_bytes,
)
from planner.optimizer.perf.types import StepModel
from planner.units import GB, GIB, TFLOPS


def sm_hz(gpu: GpuSpec, calib: Calib) -> float:
    """The GPU's SM clock, cycles/s (the kernel floors' clock where the catalog has none)."""
    return (gpu.boost_clock_mhz or calib.floor_clock_mhz) * 1e6


def clock_scale(gpu: GpuSpec, calib: Calib) -> float:
    """A kernel floor on `gpu` over the same floor at `calib.floor_clock_mhz`: fixed work in
    SM cycles takes longer on a slower clock (1 where the clock is unknown)."""
    return calib.floor_clock_mhz * 1e6 / sm_hz(gpu, calib)


def gemm_peak_and_efficiency(gpu: GpuSpec, calib: Calib, quantization: str) -> tuple[float, float]:
    """(peak dense FLOP/s, achieved share of it) of a linear layer in `quantization`: fp8 GEMMs
    where the hardware has fp8, fp4 GEMMs (NVFP4, MXFP4) where it has fp4.

    Elsewhere the weights are dequantized to 16-bit in the GEMM (Marlin-style kernels: fp8 on
    Ampere, fp4 before Blackwell, every integer 4-bit format): the bf16 rate, and for the
    integer 4-bit formats no more per SM than `Calib.w4a16_flops_per_sm_cycle`.
    """
    if quantization == "fp8" and gpu.fp8_tflops:
        return gpu.fp8_tflops * TFLOPS, calib.fp8_compute_efficiency
    if quantization in ("nvfp4", "mxfp4") and gpu.fp4_tflops:
        return gpu.fp4_tflops * TFLOPS, calib.fp4_compute_efficiency
    peak = (gpu.fp16_tflops if quantization == "fp16" else gpu.bf16_tflops) * TFLOPS  # FLOP/s
    if quantization in W4A16_QUANTS and gpu.sm_count:  # mma.sync: a per-SM cap
        peak = min(peak, gpu.sm_count * sm_hz(gpu, calib) * calib.w4a16_flops_per_sm_cycle)
    return peak, calib.compute_efficiency


def gemm_flops(gpu: GpuSpec, calib: Calib, quantization: str) -> float:
    """Achieved dense FLOP/s of a linear layer in `quantization` (see gemm_peak_and_efficiency)."""
    peak, eff = gemm_peak_and_efficiency(gpu, calib, quantization)
    return peak * eff


def linear_parts(
    gpu: GpuSpec, calib: Calib, tokens: float, in_dim: int, out_dim: int, quantization: str
) -> tuple[float, float, float]:
    """(fixed s, s to stream weights and activations at peak bandwidth, s for the FLOPs at peak
    rate) of one GEMM of `tokens` x in_dim by in_dim x out_dim."""
    w_bytes = in_dim * out_dim * bytes_per_param(quantization)  # bytes
    act_bytes = tokens * (in_dim + out_dim) * 2.0  # 16-bit input and output, bytes
    fixed = calib.kernel_latency_s  # s
    if quantization == "fp8" and gpu.fp8_tflops:
        fixed += calib.fp8_gemm_extra_s
    fixed *= clock_scale(gpu, calib)
    peak, _ = gemm_peak_and_efficiency(gpu, calib, quantization)
    mem = (w_bytes + act_bytes) / (gpu.memory_bandwidth_gbps * GB)
    return fixed, mem, 2.0 * tokens * in_dim * out_dim / peak


def linear_s(
    gpu: GpuSpec, calib: Calib, tokens: int, in_dim: int, out_dim: int, quantization: str = "bf16"
) -> float:
    """One GEMM: the slower of streaming its weights and activations and doing its FLOPs at
    the efficiency factors, plus a kernel's fixed cost, s (the step model's roofline, one
    operator at a time)."""
    fixed, mem, comp = linear_parts(gpu, calib, tokens, in_dim, out_dim, quantization)
    _, eff = gemm_peak_and_efficiency(gpu, calib, quantization)
    return fixed + max(mem / calib.bandwidth_efficiency, comp / eff)


def elementwise_s(gpu: GpuSpec, calib: Calib, n_bytes: float) -> float:
    """A memory-bound elementwise kernel moving `n_bytes`, s."""
    return calib.kernel_latency_s * clock_scale(gpu, calib) + n_bytes / (
        gpu.memory_bandwidth_gbps * GB * calib.bandwidth_efficiency
    )


def attn_units_s(gpu: GpuSpec, calib: Calib, units: float) -> float:
    """What `units` (sequence, KV head) work units of decode attention cost beyond their KV
    reads, spread over the SMs (`Calib.attn_unit_cycles` each), s; 0 where the SM count is
    unknown."""
    if not gpu.sm_count:
        return 0.0
    return units * calib.attn_unit_cycles / (gpu.sm_count * sm_hz(gpu, calib))


def attention_parts(
    gpu: GpuSpec,
    calib: Calib,
    pairs: float,
    flops_per_pair: float,
    kv_bytes: float,
    decode_units: float = 0.0,
) -> tuple[float, float, float]:
    """(fixed s, s for its FLOPs at the bf16 peak, s to read `kv_bytes` at peak bandwidth) of
    one attention kernel scoring `pairs` (query, key) pairs at `flops_per_pair`; a decode
    kernel's `decode_units` (sequences x KV heads) add to its fixed time (`attn_units_s`)."""
    flops = pairs * flops_per_pair / (gpu.bf16_tflops * TFLOPS)
    fixed = calib.attn_kernel_latency_s * clock_scale(gpu, calib)  # s
    fixed += attn_units_s(gpu, calib, decode_units)
    return fixed, flops, kv_bytes / (gpu.memory_bandwidth_gbps * GB)


def linear_flops_per_token(arch: ModelArch, tp: int) -> tuple[float, float]:
    """(non-expert, routed-expert) FLOPs of the decoder's linear layers for one new token on
    one GPU (lm_head excluded: vLLM computes logits only for the sampled positions)."""
    pc = param_counts(arch)
    dense = pc["linear_attn"] + pc["linear_dense_mlp"] + pc["linear_shared_experts"]  # params
    routed = pc["one_expert_all_layers"] * arch.num_experts_per_tok  # params per token
    return 2.0 * dense / tp, 2.0 * routed / tp  # multiply + add


def dense_gemm_shapes(arch: ModelArch, tp: int) -> list[tuple[int, int, int]] | None:
    """(n out, k in, count) of each non-expert GEMM of a step on one GPU, all layers; their
    2 n k count add up to `linear_flops_per_token`'s non-expert FLOPs. None for MLA (its
    low-rank projections are not split the way the tables measure)."""
    if arch.is_mla:
        return None
    h = arch.hidden_size
    hd = arch.head_dim
    layers = arch.num_layers
    q, kv = arch.num_attention_heads * hd, arch.num_kv_heads * hd  # widths
    shapes = [((q + 2 * kv) // tp, h, layers), (h, q // tp, layers)]  # QKV, output projection
    dense_layers = arch.first_dense_layers if arch.is_moe else layers
    for width, count in (
        (arch.intermediate_size, dense_layers),
        (arch.moe_intermediate_size * arch.num_shared_experts, arch.num_moe_layers),
    ):
        if width and count:
            shapes += [(2 * width // tp, h, count), (h, width // tp, count)]  # gate-up, down
    return shapes


def gemm_kind(arch: ModelArch, quantization: str, gpu: GpuSpec) -> str | None:
    """The measured GEMM table a non-expert linear layer in `quantization` runs as: bf16 for
    16-bit weights, fp8 per tensor where the GPU multiplies in fp8 (block-scaled for MoE
    checkpoints, as `act_quant_s`); fp8 without fp8 tensor cores dequantizes to 16 bits and
    multiplies at the bf16 rate (`gemm_peak_and_efficiency`); None: no table covers that
    format (the 4-bit ones)."""
    if quantization in ("bf16", "fp16"):
        return "bf16"
    if quantization == "fp8":
        if not gpu.fp8_tflops:
            return "bf16"
        return "fp8_block" if arch.is_moe else "fp8"
    return None


@lru_cache(maxsize=8192)  # the search builds the same instance under many engine settings
def dense_compute_s_per_token(
    arch: ModelArch, quantization: str, gpu: GpuSpec, tp: int, calib: Calib, ref_tokens: int
) -> tuple[float, Source]:
    """(s per new token, source) of the non-expert GEMMs where compute binds: each GEMM's
    measured time at `ref_tokens` tokens (a full prefill chunk) over those tokens, less the
    kernel floor `step_fixed_s` already charges; the roofline at the calibrated efficiency
    where no table answers (optimizer/perf/kernels.py). Where no table answers, or the table
    gives a time faster than the peak, the roofline bounds it."""
    from planner.catalog.kernel_tables import gemm_table

    flops_dense, _ = linear_flops_per_token(arch, tp)
    roofline = flops_dense / gemm_flops(gpu, calib, quantization), "roofline"
    kind, shapes = gemm_kind(arch, quantization, gpu), dense_gemm_shapes(arch, tp)
    table = gemm_table(gpu.name, kind) if kind and shapes else None
    if table is None or not shapes:  # no table: the nearest generation's shape dependence
        low = quantization not in ("bf16", "fp16")
        return roofline[0] * borrowed_factor(gpu.arch, low, ref_tokens, shapes or []), "roofline"
    # vLLM 0.14's fp8 GEMMs (per tensor, block-scaled) measure up to 1.7x the bf16 time of a
    # shape at m = 8192 (aiconfigurator's H100 and L40S tables; H200 4096x4096: 560 TFLOP/s
    # against bf16's 815): a kernel choice of that build, not the hardware (2x the bf16 rate).
    # A per-tensor fp8 GEMM takes the bf16 table's time at the fp8 rate (`from_bf16_s`). A
    # block-scaled one (MoE checkpoints' dense layers) is only taken as no slower than bf16:
    # at the fp8 rate too, the only Hopper fp8 serving rows (MiniMax-M2.5 on H200,
    # bench/perfmodel_vs_serving.py) gain TTFT (10.4% -> 9.3% leaving the model out) but lose
    # TPOT (12.0% -> 12.4%, the worst group), and its kernels (scales per 128 of k) measure
    # 0.2-0.5 of the fp8 peak at m = 8192.
    bf16 = gemm_table(gpu.name, "bf16") if kind in ("fp8", "fp8_block") else None
    peak, _ = gemm_peak_and_efficiency(gpu, calib, quantization)
    bpp = bytes_per_param(quantization)  # weight bytes per parameter
    bw = gpu.memory_bandwidth_gbps * GB  # bytes/s

    def roof_s(m: float, n: float, k: float) -> float:
        return max(2.0 * m * n * k / peak, (n * k * bpp + m * (n + k) * 2.0) / bw)

    def from_bf16_s(bf16_s: float, m: float, n: float, k: float) -> float:
        """A per-tensor fp8 GEMM from the bf16 table's time of its shape: the table gives the
        shape's utilization, the hardware the rate (fp8 tensor cores: 2x bf16's FLOP/s, s per
        FLOP x bf16 peak / fp8 peak), no faster than streaming its 1-byte weights."""
        if kind != "fp8" or not gpu.fp8_tflops:
            return bf16_s  # block-scaled fp8: no faster than bf16 (see the comment above)
        rate = gpu.bf16_tflops / gpu.fp8_tflops  # fp8 s per bf16 s at the same utilization
        return max(
            bf16_s * rate, (n * k * bpp + m * (n + k) * 2.0) / (bw * calib.bandwidth_efficiency)
        )

    floor = calib.kernel_latency_s * clock_scale(gpu, calib)  # s, charged per kernel already
    # a profile's fitted efficiency (this team's GPUs) scales the tables' times by its ratio to
    # the generation's default: the tables give the shape's dependence, the profile the level
    eff = gemm_peak_and_efficiency(gpu, calib, quantization)[1]
    slow = gemm_peak_and_efficiency(gpu, default_calib(gpu.arch), quantization)[1] / eff
    total, sources = 0.0, []
    for n, k, count in shapes:
        got = gemm_s(table, ref_tokens, n, k, roof_s)
        if got is None:
            return roofline
        alt = gemm_s(bf16, ref_tokens, n, k, roof_s)
        if alt is not None:
            alt = from_bf16_s(alt[0], ref_tokens, n, k), alt[1]
            if alt[0] < got[0]:
                got = alt
        total += count * slow * max(got[0] - floor, 2.0 * ref_tokens * n * k / peak)
        sources.append(got[1])
    return total / ref_tokens, worst_source(sources)


def attn_flops_per_pair(arch: ModelArch, tp: int, ref_context_tokens: int) -> float:
    """FLOPs of attention for one (new token, context token) pair on one GPU.

    QK^T and PV, 2 FLOPs each per head dim. MLA as vLLM prefills it (where attention compute
    matters): the latent expanded to per-head keys (nope + rope dims) and values; its decode
    scores against the latent (absorbed form), bound by reading it (the step's KV side).
    Sliding layers only see their window: at the reference context they weigh window/context.
    """
    heads = arch.num_attention_heads / tp
    if arch.is_mla:
        qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim  # key dim per head
        per_layer = 2 * heads * qk + 2 * heads * arch.v_head_dim
    else:
        per_layer = 4 * heads * arch.head_dim
    layers = float(arch.num_layers)
    if arch.num_sliding_layers and ref_context_tokens > arch.sliding_window:
        layers = (
            arch.num_full_layers
            + arch.num_sliding_layers * arch.sliding_window / ref_context_tokens
        )
    return per_layer * layers


def act_quant_s(gpu: GpuSpec, calib: Calib, quantization: str, moe: bool) -> float:
    """Fixed cost a GEMM in `quantization` adds to a 16-bit one, s: quantizing its activations
    first where the hardware multiplies in that format (fp8 per tensor; the block-scaled fp8 of
    MoE checkpoints per group of 128: dearer; NVFP4/MXFP4 like fp8). Weight-only formats
    (int4, AWQ, GPTQ; fp8 or fp4 without the tensor cores) dequantize inside the GEMM: 0."""
    if quantization == "fp8" and gpu.fp8_tflops:
        extra = calib.fp8_block_gemm_extra_s if moe else calib.fp8_gemm_extra_s  # s
    elif quantization in ("nvfp4", "mxfp4") and gpu.fp4_tflops:
        extra = calib.fp8_gemm_extra_s  # s
    else:
        return 0.0
    return extra * clock_scale(gpu, calib)


def step_fixed_s(arch: ModelArch, quantization: str, gpu: GpuSpec, calib: Calib) -> float:
    """The GPU time of one step however small its batch, s: the per-step overhead plus the
    chain of kernels every decoder layer launches, each taking a minimum time even inside a
    CUDA graph (`kernel_latency_s`; the attention kernel `attn_kernel_latency_s`), plus the
    activation quantization of each quantized GEMM (`act_quant_s`), all scaled to the GPU's
    SM clock (`clock_scale`). The CPU build has no such floor: its fixed costs are in
    `step_overhead_s`.

    Kernels per layer: GQA attention 5 (norm, QKV, rotary, cache write, output projection)
    and the attention kernel; MLA 11 (norm, q down/norm/up, latent down/norm, rotary, cache
    write, the two absorbed products, output projection) and the attention kernel; a dense
    MLP 4 (norm, gate-up, activation, down); a MoE MLP 8 (norm, router, top-k, token sort,
    the two grouped expert GEMMs, activation, combine) and 4 more for shared experts.
    """
    if gpu.arch == "cpu":
        return calib.step_overhead_s
    clock = clock_scale(gpu, calib)  # the floors take longer on a slower SM clock
    k = calib.kernel_latency_s * clock  # s per kernel
    q_dense = "bf16" if arch.is_moe and quantization in EXPERT_ONLY_QUANTS else quantization
    dense_q = act_quant_s(gpu, calib, q_dense, arch.is_moe)  # s per non-expert GEMM
    expert_q = act_quant_s(gpu, calib, quantization, arch.is_moe)  # s per grouped expert GEMM
    attn_gemms = 4 if arch.is_mla else 2  # quantized projections of the attention block
    attn = (11 if arch.is_mla else 5) * k + calib.attn_kernel_latency_s * clock
    attn += attn_gemms * dense_q
    mlp = 4 * k + 2 * dense_q  # s, a dense MLP
    moe = 8 * k + 2 * expert_q  # s, a routed MoE MLP
    if arch.num_shared_experts:
        moe += 4 * k + 2 * dense_q
    dense_layers = arch.num_layers - arch.num_moe_layers
    return (
        calib.step_overhead_s
        + arch.num_layers * attn
        + dense_layers * mlp
        + arch.num_moe_layers * moe
    )


def allreduce_coeffs(
    arch: ModelArch, gpu: GpuSpec, tp: int, interconnect: str, calib: Calib
) -> tuple[float, float]:
    """(s per token, s per step) of TP all-reduces: two per layer, ring over tp GPUs, and the
    architecture's small ones (`ModelArch.tp_norm_allreduces`: a variance each, with the
    kernel that sums the squares before it and the one that rescales after it)."""
    if tp <= 1:
        return 0.0, 0.0
    nvlink = interconnect == "nvlink" and gpu.nvlink_gbps is not None
    if nvlink:
        link_gbps, lat_s = (
            gpu.nvlink_gbps * calib.nvlink_efficiency,
            calib.nvlink_latency_s,
        )  # GB/s, s
    else:
        link_gbps, lat_s = gpu.pcie_gbps * calib.link_efficiency, calib.link_latency_s
    ring = 2.0 * (tp - 1) / tp  # bytes each GPU sends per byte reduced (ring all-reduce)
    per_token = (
        2 * arch.num_layers * arch.hidden_size * 2.0 * ring
    )  # bytes/token, 16-bit activations
    latency = 2 * arch.num_layers * lat_s  # s/step
    if arch.tp_norm_allreduces:
        # MiniMax-M2.5's serving runs (bench/perfmodel_vs_serving.py rows): going from 1 to 2
        # B200/B300 GPUs its decode step shrinks ~1 ms less than the halved reads give, about
        # 16 us a layer, where Llama-3.1-70B's shrinks as they give
        norm = lat_s + 2 * calib.kernel_latency_s * clock_scale(gpu, calib)  # s per layer
        latency += arch.tp_norm_allreduces * arch.num_layers * norm
    return per_token / (link_gbps * GB), latency


def build_step_model(
    arch: ModelArch,
    quantization: str,
    gpu: GpuSpec,
    tp: int,
    calib: Calib,
    *,
    kv_cache_dtype: str = "auto",
    ref_context_tokens: int = 4096,
    cpu_offload_gib: float = 0.0,
    interconnect: str = "pcie",
    graph_max_tokens: int = 512,
    ref_batch_tokens: int = 8192,
) -> StepModel:
    """Coefficients of one engine step on this instance (see StepModel)."""
    bw = gpu.memory_bandwidth_gbps * GB * calib.bandwidth_efficiency  # bytes/s achieved
    # a MoE checkpoint in a 4-bit expert format runs its other layers in 16 bits
    q_dense = "bf16" if arch.is_moe and quantization in EXPERT_ONLY_QUANTS else quantization
    attn_flops = gpu.bf16_tflops * TFLOPS * calib.attn_efficiency  # FLOP/s achieved
    _, flops_routed = linear_flops_per_token(arch, tp)  # routed-expert FLOP per new token
    routed_flops = gemm_flops(gpu, calib, quantization) * calib.moe_compute_efficiency  # FLOP/s
    dense_s, source = dense_compute_s_per_token(arch, q_dense, gpu, tp, calib, ref_batch_tokens)
    if arch.is_moe:
        source = "roofline"  # the grouped expert GEMMs have no table
    compute_s = dense_s + flops_routed / routed_flops
    fixed_s = step_fixed_s(arch, quantization, gpu, calib)  # s per step
    parts = weight_parts_bytes(arch, quantization, tp)
    # every step reads all non-expert weights; the embedding only when it is the tied lm_head
    dense = parts["attn"] + parts["mlp"] + parts["lm_head"] + parts["other"]
    if arch.tie_word_embeddings:
        dense += parts["embed"]
    offload = min(cpu_offload_gib * GIB, dense + parts["experts"])  # bytes streamed over PCIe
    h2d = min(calib.h2d_gbps, gpu.pcie_gbps) * GB  # bytes/s over the host link
    dense_read_s = max(0.0, dense - offload) / bw + offload / h2d
    expert_bw = bw * calib.expert_bandwidth_ratio  # bytes/s reading routed experts
    if quantization in W4A16_QUANTS and gpu.sm_count:  # SM-bound (Calib.w4a16_moe_gbps_per_sm)
        expert_bw = min(bw, gpu.sm_count * calib.w4a16_moe_gbps_per_sm * GB)
    kv_tok = kv_bytes_per_token(arch, kv_cache_dtype, ref_context_tokens, tp=tp)  # bytes/token/GPU
    comm_tok, comm_lat = allreduce_coeffs(arch, gpu, tp, interconnect, calib)
    return StepModel(
        overhead_s=fixed_s,
        dense_weight_read_s=dense_read_s,
        expert_read_s=parts["one_expert"] / expert_bw if arch.is_moe else 0.0,
        num_experts=arch.num_experts,
        experts_per_tok=arch.num_experts_per_tok,
        kv_read_s_per_token=kv_tok / (bw * calib.kv_read_efficiency),
        compute_s_per_token=compute_s,
        attn_s_per_pair=attn_flops_per_pair(arch, tp, ref_context_tokens) / attn_flops,
        comm_s_per_token=comm_tok,
        comm_latency_s=comm_lat,
        graph_max_tokens=graph_max_tokens if gpu.arch != "cpu" else 1 << 62,
        eager_s=arch.num_layers * calib.eager_layer_s,
        kernel_source=source,
        seq_s=calib.seq_overhead_s,
    )
