"""Per-kernel reference for small models (7-9B): one engine step as the sum of measured
per-op times, against what the perf model charges for the same step (issue 44 item 3).

Measured per-op times: aiconfigurator's vLLM 0.14 tables (bench/data/SOURCES.md): GEMMs
(planner/catalog/kernels.json, the same tables converted; interpolated as the perf model's
kernel layer does), decode attention (generation_attention_perf.parquet) and prefill
attention (context_attention_perf.parquet), per GPU. These are kernel times, not serving
runs: the comparison is per kernel, not end to end.

A step's per-op sum: every non-expert GEMM of every layer at m rows, the lm_head at one row
per sequence (16-bit: vLLM keeps it unquantized), the attention kernel of every layer, and
what the tables do not measure charged as the perf model charges it (elementwise kernels:
norms, rotary, cache write, activation, 4 a layer plus the final norm, each its kernel floor
plus its bytes; the step's scheduler overhead). Decode steps: m sequences at each of
`CONTEXTS` tokens (where the attention table measured that batch there). Prefill: one
sequence's chunk of m tokens from an empty cache.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from planner.catalog.gpus import GpuSpec, resolve_gpu
from planner.catalog.kernel_tables import gemm_table
from planner.catalog.models import ModelArch, resolve_arch
from planner.optimizer.perf import default_calib, instance_perf
from planner.optimizer.perf.kernels import gemm_s
from planner.optimizer.perf.latency import dense_gemm_shapes, elementwise_s, gemm_kind
from planner.optimizer.perf.memory import bytes_per_param
from planner.optimizer.perf.phases import decode_step_s
from planner.units import GB

DATA = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator" / "data"
GPUS = {"H100-SXM": "h100_sxm", "H200-SXM": "h200_sxm", "A100-80GB-SXM": "a100_sxm", "L40S": "l40s"}
MODELS = ("Llama-3.1-8B-Instruct", "Qwen2.5-7B-Instruct", "Qwen3-8B", "Mistral-7B-Instruct-v0.3")
QUANTS = ("bf16", "fp8")  # the tables' formats (AWQ and the 4-bit ones: no table)
DECODE_BATCHES = (1, 8, 32, 64, 128, 256)
PREFILL_CHUNKS = (512, 1024, 2048, 4096, 8192)
CONTEXTS = (512, 2048)  # tokens of context per decoding sequence
ELEMENTWISE_PER_LAYER = 4  # two norms, rotary + cache write, activation


@lru_cache(maxsize=16)
def _attn(key: str, phase: str) -> pd.DataFrame:
    name = "generation" if phase == "decode" else "context"
    df = pd.read_parquet(DATA / key / f"attention/vllm/0.14.0/{name}_attention_perf.parquet")
    return df[df.kv_cache_dtype == "bfloat16"]


def _loglin(xs: np.ndarray, ys: np.ndarray, x: float) -> float | None:
    """log-log interpolation of y(x) over the measured xs; None outside them."""
    order = np.argsort(xs)
    xs, ys = np.asarray(xs, float)[order], np.asarray(ys, float)[order]
    if len(xs) == 0 or x < xs[0] or x > xs[-1]:
        return None
    return float(np.exp(np.interp(math.log(x), np.log(xs), np.log(ys))))


def _heads_interp(df: pd.DataFrame, arch: ModelArch, fn) -> float | None:
    """`fn(rows of one query-head count)` at the architecture's query heads (linear between
    the two measured counts around it), at its KV heads."""
    df = df[(df.num_key_value_heads == arch.num_kv_heads) & (df.head_dim == arch.head_dim)]
    heads = sorted(df.num_heads.unique())
    h = arch.num_attention_heads
    lo = max((x for x in heads if x <= h), default=None)
    hi = min((x for x in heads if x >= h), default=None)
    if lo is None or hi is None:
        return None
    a, b = fn(df[df.num_heads == lo]), fn(df[df.num_heads == hi])
    if a is None or b is None:
        return None
    return a if hi == lo else a + (b - a) * (h - lo) / (hi - lo)


def decode_attention_s(key: str, arch: ModelArch, batch: int, context: int) -> float | None:
    """One layer's measured decode attention: `batch` sequences of `context` tokens, s."""

    def at(rows: pd.DataFrame) -> float | None:
        rows = rows[rows.batch_size == batch]
        return _loglin(rows.isl + rows.step, rows.latency, context)

    got = _heads_interp(_attn(key, "decode"), arch, at)
    return None if got is None else got * 1e-3  # ms -> s


def prefill_attention_s(key: str, arch: ModelArch, tokens: int) -> float | None:
    """One layer's measured prefill attention: one sequence of `tokens` from empty, s."""

    def at(rows: pd.DataFrame) -> float | None:
        rows = rows[rows.batch_size == 1]
        return _loglin(rows.isl, rows.latency, tokens)

    got = _heads_interp(_attn(key, "prefill"), arch, at)
    return None if got is None else got * 1e-3


def _gemm_s(gpu: GpuSpec, kind: str, quant: str, m: int, n: int, k: int) -> float | None:
    table = gemm_table(gpu.name, kind)
    bpp = bytes_per_param(quant)
    bw = gpu.memory_bandwidth_gbps * GB

    def roof(m_: float, n_: float, k_: float) -> float:
        return max(2.0 * m_ * n_ * k_ / (gpu.bf16_tflops * 1e12), (n_ * k_ * bpp) / bw)

    got = gemm_s(table, m, n, k, roof)
    return None if got is None else got[0]


def gemms_s(gpu: GpuSpec, arch: ModelArch, quant: str, m: int, logits: int) -> float | None:
    """Measured time of a step's GEMMs: every layer's at `m` rows, the lm_head at `logits`
    rows (16-bit), s; None where the tables do not answer."""
    kind = gemm_kind(arch, quant, gpu)
    shapes = dense_gemm_shapes(arch, 1)
    if quant == "fp8" and not gpu.fp8_tflops:
        return None  # W8A16 (Marlin) on Ampere: no table measures it
    if kind is None or shapes is None:
        return None
    total = 0.0
    for n, k, count in shapes:
        t = _gemm_s(gpu, kind, quant, m, n, k)
        if t is None:
            return None
        total += count * t
    head = _gemm_s(gpu, "bf16", "bf16", logits, arch.vocab_size, arch.hidden_size)
    return None if head is None else total + head


def other_s(gpu: GpuSpec, arch: ModelArch, tokens: int) -> float:
    """What the tables do not measure, charged as the perf model does: the elementwise
    kernels (16-bit activations in and out) and the step's scheduler overhead, s."""
    cal = default_calib(gpu.arch)
    act = tokens * arch.hidden_size * 2.0 * 2.0  # bytes in and out
    per_layer = ELEMENTWISE_PER_LAYER * elementwise_s(gpu, cal, act)
    return arch.num_layers * per_layer + elementwise_s(gpu, cal, act) + cal.step_overhead_s


def reference(
    gpu_name: str, model: str, quant: str, phase: str, m: int, context: int = 0
) -> dict | None:
    """Per-op sum and the perf model's time of one step (decode: m sequences of `context`
    tokens; prefill: a chunk of m tokens), with the GEMM and attention terms apart; None
    where no table answers."""
    gpu, arch, key = resolve_gpu(gpu_name), resolve_arch(model), GPUS[gpu_name]
    if phase == "decode":
        gemm = gemms_s(gpu, arch, quant, m, m)
        attn = decode_attention_s(key, arch, m, context)
    else:
        gemm = gemms_s(gpu, arch, quant, m, 1)
        attn = prefill_attention_s(key, arch, m)
    if gemm is None or attn is None:
        return None
    perf = instance_perf(arch, quant, gpu, 1, max_num_batched_tokens=max(PREFILL_CHUNKS))
    # the same step without its attention: no KV read, no pairs, no decode attention units
    seq_s = default_calib(gpu.arch).seq_overhead_s
    bare = replace(perf.step, kv_read_s_per_token=0.0, attn_s_per_pair=0.0, seq_s=seq_s)
    if phase == "decode":
        pred = decode_step_s(perf, m, context)
        pred_no_attn = bare.time_s(m, 0.0, 0.0, m)
    else:
        pred = perf.step.time_s(m, m, m * (m + 1) / 2.0, 1)
        pred_no_attn = bare.time_s(m, 0.0, 0.0, 1)
    ops = gemm + arch.num_layers * attn + other_s(gpu, arch, m)
    return {
        "gpu": gpu_name,
        "model": model,
        "quant": quant,
        "phase": phase,
        "m": m,
        "context": context,
        "ops_s": ops,
        "pred_s": pred,
        "ops_gemm_s": gemm,
        "ops_attn_s": arch.num_layers * attn,
        "pred_attn_s": pred - pred_no_attn,  # what attention adds to the perf model's step
    }


def table() -> pd.DataFrame:
    """Every small model x quant x GPU x phase x m the tables answer."""
    rows = []
    for gpu_name in GPUS:
        for model in MODELS:
            for quant in QUANTS:
                steps = [("decode", m, c) for m in DECODE_BATCHES for c in CONTEXTS]
                steps += [("prefill", m, 0) for m in PREFILL_CHUNKS]
                for phase, m, context in steps:
                    r = reference(gpu_name, model, quant, phase, m, context)
                    if r is not None:
                        rows.append(r)
    df = pd.DataFrame(rows)
    df["ratio"] = df.pred_s / df.ops_s
    return df


def group_medians(df: pd.DataFrame) -> pd.DataFrame:
    """Median predicted / per-op ratio per (model, quant, GPU) group, decode and prefill."""
    out = df.pivot_table(
        index=["model", "quant", "gpu"], columns="phase", values="ratio", aggfunc="median"
    )
    return out.reset_index()


def summary(df: pd.DataFrame) -> dict[str, float]:
    """RESULT cells: median |predicted / per-op sum - 1| over the steps of all small groups
    and of the fp8 ones, decode and prefill, and the worst group's median (per kernel, not
    end to end)."""
    err = (df.ratio - 1.0).abs()
    out: dict[str, float] = {}
    for tag, sel in (("small", df.quant.notna()), ("small_fp8", df.quant == "fp8")):
        for phase in ("decode", "prefill"):
            rows = sel & (df.phase == phase)
            out[f"{tag}_kernel_{phase}_err"] = float(err[rows].median())
    # the decode attention term alone, where it is a tenth of the step or more
    dec = (df.phase == "decode") & (df.ops_attn_s >= 0.1 * df.ops_s)
    attn_err = (df.pred_attn_s[dec] / df.ops_attn_s[dec] - 1.0).abs()
    out["small_kernel_decode_attn_err"] = float(attn_err.median())
    by_group = err.groupby([df.model, df.quant, df.gpu, df.phase]).median()
    for phase in ("decode", "prefill"):
        out[f"small_kernel_worst_group_{phase}_err"] = float(by_group.xs(phase, level=3).max())
    return out
