"""The measured vLLM serving runs of bench/data/aiconfigurator/silicon_vllm_agg.csv, as the
planner can express them, and the perf model's and a naive roofline's predictions of them.

Each row: mean TTFT and mean TPOT (ms) of a closed-loop benchmark with `batch_size` clients
at fixed input (`isl`) and output (`osl`) lengths, on `tp_size` GPUs. The planner expresses
tensor parallelism only: rows with attention data parallelism or expert parallelism are
skipped, by reason.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from planner.catalog.gpus import resolve_gpu
from planner.catalog.models import resolve_arch_name
from planner.optimizer.perf import Calib, closed_loop, default_calib, instance_perf
from planner.optimizer.perf.calib import with_allreduce_scale
from planner.optimizer.perf.calib_loop import ALLREDUCE_SCALE
from planner.optimizer.perf.latency import gemm_flops, linear_flops_per_token
from planner.optimizer.perf.memory import kv_bytes_per_token, weight_parts_bytes
from planner.units import GB

CSV = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator" / "silicon_vllm_agg.csv"
MODELS = {
    "MiniMaxAI/MiniMax-M2.5": "MiniMax-M2.5",
    "moonshotai/Kimi-K2.5": "Kimi-K2.5",
    "meta-llama/Llama-3.1-70B": "Llama-3.1-70B",
    "openai/gpt-oss-120b": "gpt-oss-120b",
}
SYSTEMS = {
    "b200_sxm": "B200-SXM",
    "b300_sxm": "B300-SXM",
    "h100_sxm": "H100-SXM",
    "h200_sxm": "H200-SXM",
}
CONFIG = ["model", "gpu", "quant", "tp", "isl", "osl", "c"]  # what a prediction depends on


def _quant(precision: str, model: str) -> str:
    """The planner's quantization of a row: fp4 is NVFP4 except gpt-oss (its MXFP4 checkpoint);
    int4 is weight-only (Kimi's int4 experts)."""
    if precision == "fp4":
        return "mxfp4" if model == "gpt-oss-120b" else "nvfp4"
    return precision


def catalog_name(model_path: str) -> str | None:
    """The catalog architecture of a row's model: MODELS, else its hub id resolved as
    `planner profile import` resolves it (organisation, -FP8, -Instruct, ...), else None."""
    from planner.catalog.models import resolve_hub_id

    if model_path in MODELS:
        return MODELS[model_path]
    try:
        return resolve_hub_id(model_path)[0].name
    except ValueError:
        return None


def load_rows(csv: Path = CSV) -> tuple[pd.DataFrame, Counter]:
    """(expressible rows, skipped rows counted by reason) of `csv` (the bundled runs, or a
    file in their layout)."""
    d = pd.read_csv(csv)
    names = {m: catalog_name(m) for m in d.model_path.unique()}
    skipped: Counter = Counter()
    keep = []
    for i, r in enumerate(d.itertuples(index=False)):
        if r.attention_dp_size > 1:
            skipped["attention data parallel > 1"] += 1
        elif r.moe_ep_size > 1:
            skipped["expert parallel > 1"] += 1
        elif r.moe_tp_size != r.tp_size or r.pp_size != 1:
            skipped["MoE TP or PP other than the TP degree"] += 1
        elif names[r.model_path] is None or r.system not in SYSTEMS:
            skipped["model or GPU not in the catalog"] += 1
        else:
            keep.append(i)
    k = d.iloc[keep]
    model = k.model_path.map(names)
    rows = pd.DataFrame(
        {
            "model": model,
            "gpu": k.system.map(SYSTEMS),
            "quant": [_quant(p, m) for p, m in zip(k.precision, model, strict=True)],
            "tp": k.tp_size.astype(int),
            "isl": k.isl.astype(int),
            "osl": k.osl.astype(int),
            "c": k.batch_size.astype(int),
            "ttft_ms": k.silicon_ttft_ms.astype(float),
            "tpot_ms": k.silicon_tpot_ms.astype(float),
        }
    ).reset_index(drop=True)
    return rows, skipped


# The benchmark's clients, sending fixed-length requests in lockstep, stay partly in step:
# `burst_share` of the requests arrive with the other clients' (as in a first round, every
# client sending at once: closed_loop's `rounds` = 1 / burst_share); it is fitted with the
# engine's constants but is no engine property, so it is not a Calib field.
BURST = "burst_share"
# After it, `chain_share` of all requests keep the first round's order: each group of
# prompts that shared a step arrives while the group before it is prefilled
# (closed_loop's `chained`); fitted likewise.
CHAIN = "chain_share"


# Blackwell has no per-operator table: the achieved share of its fp8 and fp4 tensor-core
# peaks is fitted with the engine's constants (Blackwell GPUs only; Hopper keeps its tables').
LOWP_BLACKWELL = "blackwell_lowp_efficiency"
# Nor for its block-scaled fp8 GEMMs' fixed cost (quantizing the activations per group of 128
# first): Hopper's comes from its fp8_block tables (Calib.fp8_block_gemm_extra_s); Blackwell's
# is fitted with the engine's constants (Blackwell GPUs only).
FP8_BLOCK_BLACKWELL = "blackwell_fp8_block_gemm_extra_s"
# A team's own GPUs' GEMMs against the shipped efficiencies: one factor on every GEMM
# efficiency (bf16, fp8, fp4; the routed experts' follow), what a calibration fits.
COMPUTE_SCALE = "compute_scale"
# Nor for its prefill attention kernels: their achieved share of the bf16 peak is fitted with
# the engine's constants (Blackwell GPUs only; Hopper keeps its attention tables' 0.48).
ATTN_BLACKWELL = "blackwell_attn_efficiency"


def calib_for(gpu: str, theta: dict[str, float]) -> Calib:
    """The GPU generation's defaults with the fitted constants `theta` laid over them."""
    arch = resolve_gpu(gpu).arch
    special = (BURST, CHAIN, LOWP_BLACKWELL, FP8_BLOCK_BLACKWELL, COMPUTE_SCALE, ATTN_BLACKWELL)
    special += (ALLREDUCE_SCALE,)  # a team's calibration's (calib_loop): on the TP all-reduces
    upd = {k: v for k, v in theta.items() if k not in special}
    if arch == "blackwell" and LOWP_BLACKWELL in theta:
        eff = theta[LOWP_BLACKWELL]
        upd.update(fp8_compute_efficiency=eff, fp4_compute_efficiency=eff)
    if arch == "blackwell" and FP8_BLOCK_BLACKWELL in theta:
        upd.update(fp8_block_gemm_extra_s=theta[FP8_BLOCK_BLACKWELL])
    if arch == "blackwell" and ATTN_BLACKWELL in theta:
        upd.update(attn_efficiency=theta[ATTN_BLACKWELL])
    cal = dataclasses.replace(default_calib(arch), **upd)
    cal = with_allreduce_scale(cal, theta.get(ALLREDUCE_SCALE, 1.0))
    scale = theta.get(COMPUTE_SCALE, 1.0)
    if scale == 1.0:
        return cal
    return dataclasses.replace(
        cal,
        compute_efficiency=cal.compute_efficiency * scale,
        fp8_compute_efficiency=cal.fp8_compute_efficiency * scale,
        fp4_compute_efficiency=cal.fp4_compute_efficiency * scale,
        attn_efficiency=cal.attn_efficiency * scale,
    )


def kv_dtype(quant: str) -> str:
    """The KV cache dtype of a row: fp8 for the fp8 and fp4 checkpoints. The rows record none,
    but they need it: MiniMax-M2.5 fp8 on 4 B300 at 512 clients x (8192 + 1024) tokens runs
    every sequence at once (TPOT 94 ms, 1.7x the 256-client run's 55 ms; TTFT 3.3 s, no
    queue) and that KV in 16 bits (254 kB/token, 283 GB per GPU) exceeds the GPU's memory."""
    return "fp8" if quant in ("fp8", "nvfp4", "mxfp4") else "auto"


def predict(configs: pd.DataFrame, theta: dict[str, float]) -> pd.DataFrame:
    """Perf-model TTFT and TPOT (ms) of unique configs: vLLM's defaults for the GPU (no flags),
    the closed loop of `c` clients, `theta[BURST]` of the requests arriving in a burst (the
    first round) of those not among the `theta[CHAIN]` in its order."""
    out = []
    for m, g, q, tp, isl, osl, c in configs[CONFIG].itertuples(index=False):
        perf = instance_perf(
            resolve_arch_name(m),
            q,
            resolve_gpu(g),
            int(tp),
            interconnect="nvlink",
            kv_cache_dtype=kv_dtype(q),
            calib=calib_for(g, theta),
        )
        rounds, chained = 1.0 / theta[BURST], theta[CHAIN]
        r = closed_loop(perf, int(isl), int(osl), int(c), rounds=rounds, chained=chained)
        out.append((r.ttft_s * 1e3, r.tpot_s * 1e3))
    return configs[CONFIG].assign(ttft_pred=[o[0] for o in out], tpot_pred=[o[1] for o in out])


def roofline_parts(configs: pd.DataFrame) -> pd.DataFrame:
    """The naive hand roofline's two sums per config: the bytes a decode step reads (weights,
    the experts a batch of c touches, KV) over peak bandwidth, and the prompt's FLOPs over peak
    rate, s."""
    out = []
    for m, g, q, tp, isl, osl, c in configs[CONFIG].itertuples(index=False):
        a, gpu = resolve_arch_name(m), resolve_gpu(g)
        parts = weight_parts_bytes(a, q, int(tp))
        w = parts["attn"] + parts["mlp"] + parts["lm_head"] + parts["other"]  # bytes
        if a.is_moe:
            touched = a.num_experts * (1 - (1 - a.num_experts_per_tok / a.num_experts) ** c)
            w += parts["one_expert"] * touched
        kv = c * (isl + osl / 2) * kv_bytes_per_token(a, "auto", isl + osl, tp=int(tp))
        dense, routed = linear_flops_per_token(a, int(tp))
        unit = Calib(compute_efficiency=1.0, fp8_compute_efficiency=1.0, fp4_compute_efficiency=1.0)
        out.append(
            (
                (w + kv) / (gpu.memory_bandwidth_gbps * GB),
                isl * (dense + routed) / gemm_flops(gpu, unit, q),
            )
        )
    return configs[CONFIG].assign(mem_s=[o[0] for o in out], flop_s=[o[1] for o in out])


def roofline(parts: pd.DataFrame, p: dict[str, float]) -> pd.DataFrame:
    """The roofline with its four fitted constants: TPOT = step_s + bytes / (bandwidth x
    bw_eff); TTFT = request_s + FLOPs / (peak x flop_eff), ms."""
    return parts[CONFIG].assign(
        tpot_pred=(p["step_s"] + parts.mem_s / p["bw_eff"]) * 1e3,
        ttft_pred=(p["request_s"] + parts.flop_s / p["flop_eff"]) * 1e3,
    )


def errors(rows: pd.DataFrame, pred: pd.DataFrame) -> pd.DataFrame:
    """Rows with their predictions and absolute relative errors (`ttft_err`, `tpot_err`)."""
    j = rows.merge(pred, on=CONFIG, how="left")
    return j.assign(
        ttft_err=(j.ttft_pred / j.ttft_ms - 1).abs(),
        tpot_err=(j.tpot_pred / j.tpot_ms - 1).abs(),
    )


# A row counts for at most this |log ratio| in a fit: the score is a median, and rows the
# model cannot express (a benchmark's stalls, 2-5x off) should not pull the constants. 0.2
# (about 22%) rather than 1.5: out of sample TTFT 16.0% -> 15.3% (leave one model out), 15.1%
# -> 14.8% (leave one GPU out) on these rows, with 8 sweeps of the fit rather than 4.
CLIP = 0.2
FIT_SWEEPS = 8  # coordinate sweeps of `fit_model`: 4 left the fit short of converged


def loss(j: pd.DataFrame, metric: str) -> float:
    """What a fit minimizes: the mean clipped |log ratio| of `metric` (ttft or tpot)."""
    r = np.abs(np.log(j[f"{metric}_pred"] / j[f"{metric}_ms"]))
    return float(np.mean(np.minimum(r.fillna(CLIP), CLIP)))


def coordinate_fit(
    f, theta: dict[str, float], bounds: dict, sweeps: int = 3, step: float = 0.5
) -> tuple[dict, float]:
    """Minimize f(theta) one constant at a time on a shrinking multiplicative grid."""
    best = f(theta)
    for _ in range(sweeps):
        for k, (lo, hi) in bounds.items():
            for mult in (1 + step, 1 / (1 + step), (1 + step) ** 2, 1 / (1 + step) ** 2):
                th = {**theta, k: min(hi, max(lo, theta[k] * mult))}
                v = f(th)
                if v < best:
                    best, theta = v, th
        step /= 2
    return theta, best


def fit_model(
    rows: pd.DataFrame, start: dict, bounds: dict, prior_weight: float = 0.0
) -> dict[str, float]:
    """The constants in `bounds` that fit `rows` best, all at once, on TTFT and TPOT together
    (the sum of both losses); the others stay at `start`. `prior_weight` > 0 adds that weight
    times the sum of each fitted constant's squared log ratio to its `start` value: a prior
    that lets few rows move a constant only as far as they pay for it."""
    configs = rows.drop_duplicates(CONFIG)

    def f(theta: dict) -> float:
        j = errors(rows, predict(configs, theta))
        prior = sum(math.log(theta[k] / start[k]) ** 2 for k in bounds) if prior_weight else 0.0
        return loss(j, "ttft") + loss(j, "tpot") + prior_weight * prior

    return coordinate_fit(f, start, bounds, sweeps=FIT_SWEEPS)[0]


ROOF_START = {"bw_eff": 0.8, "step_s": 1e-3, "flop_eff": 0.5, "request_s": 0.02}
ROOF_BOUNDS = {
    "bw_eff": (0.05, 1.0),
    "step_s": (1e-5, 0.05),
    "flop_eff": (0.01, 1.0),
    "request_s": (1e-3, 1.0),
}


def fit_roofline(rows: pd.DataFrame) -> dict[str, float]:
    """The roofline's four constants fitted to `rows` (the same loss as the model's)."""
    parts = roofline_parts(rows.drop_duplicates(CONFIG))

    def f(p: dict) -> float:
        j = errors(rows, roofline(parts, p))
        return loss(j, "ttft") + loss(j, "tpot")

    return coordinate_fit(f, ROOF_START, ROOF_BOUNDS, sweeps=6)[0]
