"""Step time of a continuous-batching engine and the steady state at a concurrency.

`build_step_model` turns a GPU spec, an architecture and efficiency factors into the
coefficients of `StepModel`; the simulator calls `StepModel.time_s` for every step.
"""

from __future__ import annotations

import math

from planner.catalog.gpus import GpuSpec
from planner.catalog.models import ModelArch, param_counts
from planner.optimizer.perf.calib import Calib
from planner.optimizer.perf.memory import bytes_per_param, kv_bytes_per_token, weight_parts_bytes
from planner.optimizer.perf.types import InstancePerf, StepModel
from planner.units import GB, GIB, TFLOPS


def gemm_flops(gpu: GpuSpec, calib: Calib, quantization: str) -> float:
    """Achieved dense FLOP/s of the linear layers: fp8 GEMMs where the hardware has fp8.

    Ampere has no fp8 tensor cores (fp8 weights are dequantized: bf16 rate); 4-bit formats
    dequantize to 16-bit in the GEMM (Marlin-style kernels).
    """
    if quantization == "fp8" and gpu.fp8_tflops:
        return gpu.fp8_tflops * TFLOPS * calib.fp8_compute_efficiency
    peak = gpu.fp16_tflops if quantization == "fp16" else gpu.bf16_tflops
    return peak * TFLOPS * calib.compute_efficiency


def linear_s(
    gpu: GpuSpec, calib: Calib, tokens: int, in_dim: int, out_dim: int, quantization: str = "bf16"
) -> float:
    """One GEMM of `tokens` x in_dim by in_dim x out_dim: the slower of streaming its weights
    and activations, and its FLOPs, plus a kernel's fixed cost, s (the step model's roofline,
    one operator at a time)."""
    bw = gpu.memory_bandwidth_gbps * GB * calib.bandwidth_efficiency  # bytes/s
    flops = gemm_flops(gpu, calib, quantization)  # FLOP/s achieved
    w_bytes = in_dim * out_dim * bytes_per_param(quantization)  # bytes
    act_bytes = tokens * (in_dim + out_dim) * 2.0  # 16-bit input and output, bytes
    fixed = calib.kernel_latency_s  # s
    if quantization == "fp8" and gpu.fp8_tflops:
        fixed += calib.fp8_gemm_extra_s
    return fixed + max((w_bytes + act_bytes) / bw, 2.0 * tokens * in_dim * out_dim / flops)


def elementwise_s(gpu: GpuSpec, calib: Calib, n_bytes: float) -> float:
    """A memory-bound elementwise kernel moving `n_bytes`, s."""
    return calib.kernel_latency_s + n_bytes / (
        gpu.memory_bandwidth_gbps * GB * calib.bandwidth_efficiency
    )


def attention_op_s(
    gpu: GpuSpec, calib: Calib, pairs: float, flops_per_pair: float, kv_bytes: float
) -> float:
    """One attention kernel: `pairs` (query, key) scores at `flops_per_pair`, reading
    `kv_bytes` of KV cache; the slower of the two plus a kernel's fixed cost, s."""
    flops = gpu.bf16_tflops * TFLOPS * calib.attn_efficiency  # FLOP/s achieved
    bw = gpu.memory_bandwidth_gbps * GB * calib.bandwidth_efficiency * calib.kv_read_efficiency
    return calib.attn_kernel_latency_s + max(pairs * flops_per_pair / flops, kv_bytes / bw)


def linear_flops_per_token(arch: ModelArch, tp: int) -> float:
    """FLOPs of the decoder's linear layers for one new token on one GPU (lm_head excluded:
    vLLM computes logits only for the sampled positions)."""
    pc = param_counts(arch)
    active = (
        pc["linear_attn"]
        + pc["linear_dense_mlp"]
        + pc["linear_shared_experts"]
        + pc["one_expert_all_layers"] * arch.num_experts_per_tok
    )  # params touched per token
    return 2.0 * active / tp  # multiply + add


def attn_flops_per_pair(arch: ModelArch, tp: int, ref_context_tokens: int) -> float:
    """FLOPs of attention for one (new token, context token) pair on one GPU.

    QK^T and PV, 2 FLOPs each per head dim. MLA scores against the latent (absorbed form).
    Sliding layers only see their window: at the reference context they weigh window/context.
    """
    heads = arch.num_attention_heads / tp
    if arch.is_mla:
        per_layer = (
            2 * heads * (arch.kv_lora_rank + arch.qk_rope_head_dim) + 2 * heads * arch.kv_lora_rank
        )
    else:
        per_layer = 4 * heads * arch.head_dim
    layers = float(arch.num_layers)
    if arch.num_sliding_layers and ref_context_tokens > arch.sliding_window:
        layers = (
            arch.num_full_layers
            + arch.num_sliding_layers * arch.sliding_window / ref_context_tokens
        )
    return per_layer * layers


def allreduce_coeffs(
    arch: ModelArch, gpu: GpuSpec, tp: int, interconnect: str, calib: Calib
) -> tuple[float, float]:
    """(s per token, s per step) of TP all-reduces: two per layer, ring over tp GPUs."""
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
) -> StepModel:
    """Coefficients of one engine step on this instance (see StepModel)."""
    bw = gpu.memory_bandwidth_gbps * GB * calib.bandwidth_efficiency  # bytes/s achieved
    flops = gemm_flops(gpu, calib, quantization)  # FLOP/s achieved
    attn_flops = gpu.bf16_tflops * TFLOPS * calib.attn_efficiency  # FLOP/s achieved
    parts = weight_parts_bytes(arch, quantization, tp)
    # every step reads all non-expert weights; the embedding only when it is the tied lm_head
    dense = parts["attn"] + parts["mlp"] + parts["lm_head"] + parts["other"]
    if arch.tie_word_embeddings:
        dense += parts["embed"]
    offload = min(cpu_offload_gib * GIB, dense + parts["experts"])  # bytes streamed over PCIe
    h2d = min(calib.h2d_gbps, gpu.pcie_gbps) * GB  # bytes/s over the host link
    dense_read_s = max(0.0, dense - offload) / bw + offload / h2d
    kv_tok = kv_bytes_per_token(arch, kv_cache_dtype, ref_context_tokens, tp=tp)  # bytes/token/GPU
    comm_tok, comm_lat = allreduce_coeffs(arch, gpu, tp, interconnect, calib)
    return StepModel(
        overhead_s=calib.step_overhead_s,
        dense_weight_read_s=dense_read_s,
        expert_read_s=parts["one_expert"] / bw if arch.is_moe else 0.0,
        num_experts=arch.num_experts,
        experts_per_tok=arch.num_experts_per_tok,
        kv_read_s_per_token=kv_tok / (bw * calib.kv_read_efficiency),
        compute_s_per_token=linear_flops_per_token(arch, tp) / flops,
        attn_s_per_pair=attn_flops_per_pair(arch, tp, ref_context_tokens) / attn_flops,
        comm_s_per_token=comm_tok,
        comm_latency_s=comm_lat,
    )


def _prefill_chunks(
    perf: InstancePerf, input_len: int, cached_tokens: int, decode_batch: int, decode_kv: float
) -> tuple[float, float]:
    """(wall time, added time) of prefilling `input_len` tokens in chunks of `chunk_tokens`,
    each chunk riding in a step with `decode_batch` sequences that hold `decode_kv` KV tokens.
    Added time: what the chunks add to those decode steps (what the other sequences feel)."""
    done = max(0, min(cached_tokens, input_len))
    wall = added = 0.0
    chunk = max(1, perf.chunk_tokens)
    base = perf.step.time_s(decode_batch, decode_kv, decode_kv)  # s, the step without the chunk
    while done < input_len:
        c = min(chunk, input_len - done)
        pairs = c * done + c * (c + 1) / 2.0  # causal: each new token sees prefix + earlier chunk
        t = perf.step.time_s(c + decode_batch, decode_kv + done + c, decode_kv + pairs)
        wall += t
        added += t - base
        done += c
    return wall, added


def prefill_s(
    perf: InstancePerf,
    input_len: int,
    cached_tokens: int = 0,
    decode_batch: int = 0,
    decode_kv_tokens: float = 0.0,
) -> float:
    """Engine time to prefill `input_len` tokens (the first `cached_tokens` already in KV),
    in chunks of `chunk_tokens`, alongside `decode_batch` decoding sequences holding
    `decode_kv_tokens` KV tokens together, s."""
    return _prefill_chunks(perf, input_len, cached_tokens, decode_batch, decode_kv_tokens)[0]


def decode_step_s(perf: InstancePerf, batch: int, context_tokens: float) -> float:
    """One decode step of `batch` sequences at an average context of `context_tokens`, s."""
    kv = batch * context_tokens
    return perf.step.time_s(batch, kv, kv)


def steady_state(
    perf: InstancePerf, input_len: int, output_len: int, concurrency: int, cached_len: int = 0
) -> tuple[float, float, float]:
    """(TTFT s, TPOT s, output tokens/s) with `concurrency` clients sending back to back,
    the first `cached_len` tokens of each prompt a prefix-cache hit (not prefilled).

    The batch is capped by max_num_seqs and by how many whole requests the KV cache holds;
    clients beyond it queue (closed loop: wait = concurrency / throughput - service time).
    Prefills of the other batch members interleave with a sequence's decode steps.
    """
    output_len = max(1, output_len)
    per_req = input_len + output_len  # KV tokens one request holds at its end
    fit = perf.max_kv_tokens // per_req if per_req > 0 else 0
    if fit < 1:
        return math.inf, math.inf, 0.0
    batch = max(1, min(concurrency, perf.max_num_seqs, fit))
    ctx = input_len + output_len / 2.0  # average context of a decoding sequence, tokens
    others = batch - 1  # sequences decoding while one request prefills
    t_pre, added = _prefill_chunks(perf, input_len, cached_len, others, others * ctx)
    t_dec = decode_step_s(perf, batch, ctx)
    # over one request's output_len steps, each of the others starts once: its chunks
    # lengthen the steps this request decodes in
    tpot = t_dec + others * added / output_len
    ttft0 = perf.prefill_overhead_s + t_pre
    service = ttft0 + (output_len - 1) * tpot  # one request, admission to last token
    wait = max(0.0, concurrency * service / batch - service) if concurrency > batch else 0.0
    return ttft0 + wait, tpot, batch * output_len / service
