"""Memory of one instance per GPU: weights (with quantization scales), KV cache, overheads.

Counts come from the architecture arithmetic (planner.catalog.models.param_counts). Bytes are
decimal-free: everything here is in bytes until the caller divides by GIB.
"""

from __future__ import annotations

from planner.catalog.models import ModelArch, param_counts

# Weight bytes per parameter of a quantized linear layer, scales included.
_BF16 = 2.0  # bytes/param
_FP8 = 1.0  # bytes/param (+ one fp32 scale per output channel, added below)
_INT4_G128 = 0.5 + (2.0 + 0.5) / 128  # 4-bit weight + fp16 scale and 4-bit zero per group of 128
# `int4`: compressed-tensors pack-quantized W4A16, symmetric, one bf16 scale per group of 32
# (Kimi K2's native format: its routed experts, group_size 32 in the checkpoint's config.json)
_INT4_G32 = 0.5 + 2.0 / 32  # bytes/param
_MXFP4 = 0.5 + 1.0 / 32  # 4-bit E2M1 weight + one E8M0 scale byte per block of 32
_NVFP4 = 0.5 + 1.0 / 16  # 4-bit E2M1 weight + one E4M3 scale byte per block of 16

WEIGHT_QUANTS = ("bf16", "fp16", "fp8", "awq", "gptq", "int4", "mxfp4", "nvfp4")
# 4-bit formats whose MoE checkpoints quantize the routed experts only (gpt-oss MXFP4, Kimi's
# int4 experts, NVIDIA's NVFP4 MoE exports): attention and shared experts stay 16-bit.
EXPERT_ONLY_QUANTS = ("mxfp4", "nvfp4", "int4")
# integer 4-bit weights with 16-bit activations (W4A16): dequantized inside the GEMM
W4A16_QUANTS = ("awq", "gptq", "int4")
KV_DTYPES = ("auto", "bfloat16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2")


def bytes_per_param(quantization: str) -> float:
    """Bytes per weight of a quantized matrix, group scales included (per-channel ones not)."""
    if quantization in ("bf16", "fp16"):
        return _BF16
    if quantization == "fp8":
        return _FP8
    if quantization in ("awq", "gptq"):
        return _INT4_G128
    if quantization == "int4":
        return _INT4_G32
    if quantization == "mxfp4":
        return _MXFP4
    if quantization == "nvfp4":
        return _NVFP4
    raise ValueError(f"unknown quantization {quantization!r}; use one of {list(WEIGHT_QUANTS)}")


def linear_bytes_per_param(arch: ModelArch, quantization: str, experts: bool) -> float:
    """Bytes per parameter of a decoder linear layer; `experts`: a routed-expert weight."""
    if quantization == "fp8":
        return _FP8 + 4.0 / arch.hidden_size  # fp32 per-channel scale over ~hidden inputs
    if quantization in EXPERT_ONLY_QUANTS and arch.is_moe and not experts:
        return _BF16
    return bytes_per_param(quantization)


def weight_parts_bytes(arch: ModelArch, quantization: str, tp: int = 1) -> dict[str, float]:
    """Weight bytes on each GPU by part: dense (always read), experts (routed), embed.

    vLLM shards attention heads, MLP/expert widths and the vocabulary over TP ranks; K/V
    projections replicate when TP exceeds the KV heads. Norms/biases/vision (`other`) are
    counted sharded too (they are small).
    """
    pc = param_counts(arch)
    lin = linear_bytes_per_param(arch, quantization, experts=False)
    lin_e = linear_bytes_per_param(arch, quantization, experts=True)
    kv_repl = max(1.0, tp / arch.num_kv_heads) if not arch.is_mla else 1.0  # K/V copies per shard
    attn = (pc["linear_attn"] + pc["linear_attn_kv"] * (kv_repl - 1.0)) * lin / tp  # bytes
    mlp = (pc["linear_dense_mlp"] + pc["linear_shared_experts"]) * lin / tp  # bytes
    lm_head = pc["lm_head"] * _BF16 / tp  # bytes; untied head stays 16-bit
    embed = pc["embed"] * _BF16 / tp  # bytes
    other = pc["other"] * _BF16 / tp  # bytes
    experts = pc["linear_routed_experts"] * lin_e / tp  # bytes, all routed experts
    one_expert = pc["one_expert_all_layers"] * lin_e / tp  # bytes, one expert in every MoE layer
    return {
        "attn": attn,
        "mlp": mlp,
        "lm_head": lm_head,
        "embed": embed,
        "other": other,
        "experts": experts,
        "one_expert": one_expert,
    }


def weights_bytes(arch: ModelArch, quantization: str) -> float:
    """Checkpoint-sized weight bytes of the whole model (TP 1), scales included."""
    return weights_bytes_per_gpu(arch, quantization, 1)


def weights_bytes_per_gpu(arch: ModelArch, quantization: str, tp: int) -> float:
    """Weight bytes resident on each of `tp` GPUs."""
    p = weight_parts_bytes(arch, quantization, tp)
    return sum(v for k, v in p.items() if k != "one_expert")


def kv_dtype_bytes(kv_dtype: str, quantization: str = "bf16") -> float:
    """Bytes per KV element: `auto` follows the activation dtype (16-bit for every variant;
    `float32` is what the CPU build's `auto` means, as the planner runs it in float32)."""
    if kv_dtype in ("auto", "bfloat16", "fp16"):
        return 2.0
    if kv_dtype == "float32":
        return 4.0
    if kv_dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        return 1.0
    raise ValueError(f"unknown kv cache dtype {kv_dtype!r}; use one of {list(KV_DTYPES)}")


def _kv_layer_bytes(arch: ModelArch, kv_dtype: str, tp: int | None) -> float:
    """KV bytes of one token in one layer; on one GPU of `tp` if given, else all GPUs."""
    b = kv_dtype_bytes(kv_dtype)
    if arch.is_mla:
        # latent + rope key, one copy; vLLM keeps the full latent on every TP rank
        return (arch.kv_lora_rank + arch.qk_rope_head_dim) * b
    heads = arch.num_kv_heads if tp is None else max(1.0, arch.num_kv_heads / tp)
    return 2 * heads * arch.head_dim * b  # K and V


def kv_bytes_per_token(
    arch: ModelArch,
    kv_dtype: str = "auto",
    context_tokens: int | None = None,
    tp: int | None = None,
) -> float:
    """KV bytes one token occupies over all layers (all GPUs, or one GPU of `tp`).

    Sliding-window layers keep at most `sliding_window` tokens per sequence: at a context of
    `context_tokens` the per-token average counts them for min(1, window/context). Without a
    context every layer counts (a context within the window).
    """
    per_layer = _kv_layer_bytes(arch, kv_dtype, tp)
    layers = float(arch.num_layers)
    if (
        context_tokens is not None
        and arch.num_sliding_layers
        and context_tokens > arch.sliding_window
    ):
        layers = (
            arch.num_full_layers + arch.num_sliding_layers * arch.sliding_window / context_tokens
        )
    return per_layer * layers


def activation_bytes(arch: ModelArch, tp: int, chunk_tokens: int, max_num_seqs: int) -> float:
    """Peak activation memory of vLLM's profiling forward pass on one GPU, bytes.

    One chunk of `chunk_tokens` tokens: residual + normed hidden + QKV (16-bit), the widest
    MLP intermediate (gate+up output), plus fp32 logits and probabilities of a full batch.
    """
    h = arch.hidden_size
    qkv = (arch.num_attention_heads + 2 * arch.num_kv_heads) * arch.head_dim / tp
    mlp = 2 * arch.intermediate_size / tp
    if arch.is_moe:
        mlp = max(mlp, arch.num_experts_per_tok * (2 * arch.moe_intermediate_size / tp + h))
    per_token = 2.0 * (2 * h + qkv + mlp)  # bytes/token, 16-bit
    logits = 2 * 4.0 * max_num_seqs * arch.vocab_size  # fp32 logits + probs, bytes
    return chunk_tokens * per_token + logits
