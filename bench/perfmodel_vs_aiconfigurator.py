"""Perf model vs measured vLLM kernel times (aiconfigurator's vLLM 0.14 tables; A100, H100,
H200, L40S): GEMMs (bf16, fp8) and attention (prefill and decode), with the built-in default
efficiency factors (no fitting in this script; the defaults cite these tables).

Decode-sized GEMMs: m <= 128 tokens; prefill-sized: m >= 512. Prefill attention: isl >= 512;
decode attention: one new token per sequence over isl + step context tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from planner.catalog.gpus import resolve_gpu
from planner.optimizer.perf import default_calib
from planner.optimizer.perf.latency import attention_op_s, linear_s

DATA = Path(__file__).parent / "data" / "aiconfigurator" / "data"
GPUS = {"a100_sxm": "A100-80GB-SXM", "h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM", "l40s": "L40S"}


def mdape(pred, meas) -> float:
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    return float(np.median(np.abs(pred - meas) / meas)) if len(meas) else float("nan")


def main() -> int:
    out = {}
    for key, name in GPUS.items():
        gpu, cal = resolve_gpu(name), default_calib(resolve_gpu(name).arch)
        base = DATA / key
        gm = pd.read_parquet(base / "gemm/vllm/0.14.0/gemm_perf.parquet")
        print(
            f"{key} ({name}), defaults: compute {cal.compute_efficiency}, fp8 {cal.fp8_compute_efficiency}, "
            f"bandwidth {cal.bandwidth_efficiency}, attention {cal.attn_efficiency}, KV read {cal.kv_read_efficiency}"
        )
        for dt, q in (("bfloat16", "bf16"), ("fp8", "fp8")):
            g = gm[gm.gemm_dtype == dt]
            if g.empty:
                continue
            pred = np.array(
                [
                    linear_s(gpu, cal, int(m), int(k), int(n), q)
                    for m, n, k in zip(g.m, g.n, g.k, strict=True)
                ]
            )
            meas = g.latency.to_numpy() / 1e3
            dec, pre = (g.m <= 128).to_numpy(), (g.m >= 512).to_numpy()
            e_dec, e_pre = mdape(pred[dec], meas[dec]), mdape(pred[pre], meas[pre])
            print(
                f"  GEMM {q:5s} n={len(g):5d}: MdAPE decode-sized {e_dec:.1%}, prefill-sized {e_pre:.1%}"
            )
            out[f"{key}_gemm_{q}"] = (e_dec + e_pre) / 2
        ctx = pd.read_parquet(base / "attention/vllm/0.14.0/context_attention_perf.parquet")
        ctx = ctx[(ctx.kv_cache_dtype == "bfloat16") & (ctx.isl >= 512)]
        pairs = ctx.batch_size * ctx.isl * (ctx.isl + 1) / 2.0
        kvb = ctx.batch_size * ctx.isl * 2 * ctx.num_key_value_heads * ctx.head_dim * 2.0
        pred = [
            attention_op_s(gpu, cal, p, 4.0 * h * d, b)
            for p, h, d, b in zip(pairs, ctx.num_heads, ctx.head_dim, kvb, strict=True)
        ]
        e_ctx = mdape(pred, ctx.latency.to_numpy() / 1e3)
        gen = pd.read_parquet(base / "attention/vllm/0.14.0/generation_attention_perf.parquet")
        gen = gen[gen.kv_cache_dtype == "bfloat16"]
        n_ctx = gen.isl + gen.step  # context tokens per sequence
        pairs = gen.batch_size * n_ctx
        kvb = pairs * 2 * gen.num_key_value_heads * gen.head_dim * 2.0
        pred = [
            attention_op_s(gpu, cal, p, 4.0 * h * d, b)
            for p, h, d, b in zip(pairs, gen.num_heads, gen.head_dim, kvb, strict=True)
        ]
        e_gen = mdape(pred, gen.latency.to_numpy() / 1e3)
        print(
            f"  attention prefill n={len(ctx)}: MdAPE {e_ctx:.1%}; decode n={len(gen)}: MdAPE {e_gen:.1%}"
        )
        out[f"{key}_attn_prefill"], out[f"{key}_attn_decode"] = e_ctx, e_gen
    print("RESULT " + " ".join(f"{k}_mdape={v:.3f}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
