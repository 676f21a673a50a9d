"""Decode attention in the step model (issue 44 item 3): each sequence's work units charged
apart from its KV reads, KV read at the weights' rate, an fp8 cache bound by its dequantizing
SMs; checked against aiconfigurator's vLLM 0.14 decode-attention tables in bench/data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from planner.catalog.gpus import resolve_gpu
from planner.catalog.models import resolve_arch_name
from planner.optimizer.perf import default_calib, instance_perf, kv_bytes_per_token
from planner.optimizer.perf.latency import clock_scale

TABLES = Path(__file__).resolve().parents[2] / "bench" / "data" / "aiconfigurator" / "data"
LLAMA_8B = resolve_arch_name("Llama-3.1-8B-Instruct")


def _step(gpu: str, kv: str = "auto"):
    return instance_perf(LLAMA_8B, "bf16", resolve_gpu(gpu), 1, kv_cache_dtype=kv).step


def test_more_sequences_over_the_same_kv_cost_more():
    """The same context tokens split over more sequences give the decode kernels more work
    units (one per sequence and KV head): the step takes longer (it did not)."""
    st = _step("H200-SXM")
    kv = 64 * 2048.0
    few, many = st.time_s(64, kv, kv, 64), st.time_s(64, kv, kv, 256)
    gpu, cal = resolve_gpu("H200-SXM"), default_calib("hopper")
    units = LLAMA_8B.num_layers * LLAMA_8B.num_kv_heads * (256 - 64)
    want = units * cal.attn_unit_cycles / (gpu.sm_count * gpu.boost_clock_mhz * 1e6)
    assert many - few == pytest.approx(want, rel=1e-9)


def test_fp8_cache_is_dequantized_on_the_sms():
    """Half the bytes of a 16-bit cache: half the time where bandwidth binds (L40S), less
    saved where the SMs dequantizing it bind (H200: 4.8 TB/s on 132 SMs)."""
    for gpu, lo, hi in (("H200-SXM", 0.65, 0.85), ("L40S", 0.45, 0.55)):
        ratio = _step(gpu, "fp8").kv_read_s_per_token / _step(gpu).kv_read_s_per_token
        assert lo <= ratio <= hi, (gpu, ratio)


@pytest.mark.parametrize(
    ("key", "gpu", "kv"),
    [
        ("h200_sxm", "H200-SXM", "bfloat16"),
        ("h100_sxm", "H100-SXM", "bfloat16"),
        ("h200_sxm", "H200-SXM", "fp8"),
        ("a100_sxm", "A100-80GB-SXM", "bfloat16"),
    ],
)
def test_large_decode_attention_matches_the_tables(key, gpu, kv):
    """Llama-3.1-8B's decode attention (32 heads, 8 KV heads) where it reads 256 MB or more a
    layer: one layer's kernel as the step model charges it (its floor, its units, its KV
    reads) within 15% of the measured median (16-bit KV read at 0.587 of peak on Hopper: +55%)."""
    df = pd.read_parquet(TABLES / key / "attention/vllm/0.14.0/generation_attention_perf.parquet")
    df = df[(df.kv_cache_dtype == kv) & (df.num_heads == 32) & (df.num_key_value_heads == 8)]
    ctx = (df.isl + df.step).to_numpy()
    batch = df.batch_size.to_numpy()
    kv_dtype = "fp8" if kv == "fp8" else "auto"
    per_token = kv_bytes_per_token(LLAMA_8B, kv_dtype) / LLAMA_8B.num_layers  # bytes, one layer
    big = batch * ctx * per_token >= 256e6
    assert big.sum() >= 10
    st, spec, cal = _step(gpu, kv_dtype), resolve_gpu(gpu), default_calib(resolve_gpu(gpu).arch)
    layers = LLAMA_8B.num_layers
    floor = cal.attn_kernel_latency_s * clock_scale(spec, cal)
    pred = floor + (st.seq_s * batch[big] + st.kv_read_s_per_token * batch[big] * ctx[big]) / layers
    ratio = pred / (df.latency.to_numpy()[big] / 1e3)
    assert abs(np.median(ratio) - 1.0) <= 0.15, np.median(ratio)


def test_mla_decode_keeps_its_rate_and_charges_no_units():
    """MLA's decode kernels are in no table: no work units, its latent read at the rate the
    step model used before (0.62 of the weights' on Hopper)."""
    kimi, gpu = resolve_arch_name("Kimi-K2.5"), resolve_gpu("H200-SXM")
    st = instance_perf(kimi, "int4", gpu, 8, interconnect="nvlink").step
    cal = default_calib("hopper")
    bw = gpu.memory_bandwidth_gbps * 1e9 * cal.bandwidth_efficiency * 0.62
    assert st.seq_s == 0.0
    assert st.kv_read_s_per_token == pytest.approx(
        kv_bytes_per_token(kimi, "auto", 4096, tp=8) / bw
    )
