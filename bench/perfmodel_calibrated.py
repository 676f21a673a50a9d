"""Calibrated fidelity (issue 31, item 5): calibrate on one model's runs at low concurrency,
predict every other run on that GPU.

Data: bench/data/aiconfigurator/silicon_vllm_agg.csv, the 744 serving runs the planner can
express (bench/lib/serving.py). For each GPU and each model measured on it:

1. the starting constants are fitted on the other GPUs' rows only (leave that GPU out, as
   bench/perfmodel_vs_serving.py does);
2. a team's calibration: one factor on that GPU's compute rates (every GEMM efficiency,
   bf16/fp8/fp4, and attention's: serving.COMPUTE_SCALE, as `planner profile calibrate`
   keeps attention's ratio to the GEMMs') and one on its TP all-reduces' time
   (ALLREDUCE_SCALE, which `planner profile calibrate` fits alike from runs at TP > 1)
   fitted to that one model's runs at concurrency <= 8 on that GPU, pulled toward 1 by a
   prior whose weight is chosen on the other GPUs' runs only (nested: `choose_prior_weight`);
3. scored on every other run on that GPU (the other models, and the same model above 8).

Prints median |error| of TTFT and TPOT per GPU and overall (over every (GPU, calibrating
model) pair's predictions), the same with the starting constants alone (no calibration),
and the signed median errors per (GPU, model, precision, TP): what the per-GPU constants
cannot fix. Targets: median TPOT <= 6%, TTFT <= 12%. A few minutes.

    python bench/perfmodel_calibrated.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from perfmodel_vs_serving import BOUNDS, START
from serving import COMPUTE_SCALE, CONFIG, errors, fit_model, load_rows, predict

from planner.optimizer.perf.calib_loop import ALLREDUCE_BOUNDS, ALLREDUCE_SCALE

TPOT_TARGET, TTFT_TARGET = 0.06, 0.12
LOW_CONCURRENCY = 8
# What a team's runs calibrate: one scale on the GPU's compute rates (GEMMs and attention;
# the routed experts' follow) and one on its all-reduces' (below), fitted per (GPU,
# calibrating model) to that model's runs at concurrency <= 8 on that GPU, within a factor 3
# of the shipped rates. One model's low-concurrency runs pin little else: the prefills of
# their TTFTs and the chunk-carrying steps of their TPOTs are where compute binds, and the
# error a per-GPU constant can remove is small next to the model's within-GPU spread: from
# the leave-one-GPU-out bases, all nine serving constants refitted per GPU on *every* run of
# that GPU (in sample, a bound, not a figure) still leave TTFT 11.7%, TPOT 6.4% over the 744
# runs (each once; the bases alone 13.4%, 7.3%), and an exact per-GPU factor on each of TTFT
# and TPOT 12.6%, 7.3%: no per-GPU calibration of this model's constants reaches TPOT 6%.
# Tried here (nested prior weight each; TTFT, TPOT; the starting constants alone 13.4%,
# 7.1%):
# - step overhead + request overheads (fixed, per prompt token) + Blackwell's fp8/fp4 GEMM
#   efficiency (the earlier calibration): 14.0%, 7.7%; they absorb the calibrating model's
#   own error (B200's request overhead 1 ms calibrated on gpt-oss-120b, 46 ms on MiniMax)
#   and carry it to the other models;
# - step overhead + Blackwell's fp8/fp4 GEMM efficiency: 13.5%, 7.8%;
# - bandwidth efficiency (+ Blackwell's fp8/fp4 GEMM efficiency): 13.4%, 7.3%; with the
#   request overhead too: 13.4%, 7.3%; with both request overheads: 13.4%, 7.3%;
# - Blackwell's fp8/fp4 GEMM efficiency alone (Hopper uncalibrated): 13.5%, 6.8%;
# - this compute scale (13.6%, 6.7%) with bandwidth efficiency too: 13.5%, 7.4%; with the
#   fixed request overhead too: 13.6%, 6.7% (no gain for a second constant);
# - this compute scale with a prior weight of 10 in the grid too (H200 picks it): 13.6%, 6.7%;
# - this compute scale fitted on TTFT alone: 14.6%, 6.9%; on TPOT alone: 13.3%, 7.0%;
# - the compute scale fitted in the starting constants as well (all GPUs, then per GPU):
#   13.4%, 6.7% here, but bench/perfmodel_vs_serving.py loses TTFT with it (leave one model
#   out 0.148 0.080, leave one GPU out 0.137 0.071), so the shipped constants stay.
# With the routed experts' read rate fitted in the starting constants (serving.py's tenth,
# expert_bandwidth_ratio: uncalibrated 13.5%, 6.5%; this compute scale 13.7%, 6.7%):
# - bandwidth efficiency instead of the compute scale: 13.5%, 7.9%; both: 13.5%, 8.1%;
# - the compute scale and the expert read ratio: 13.7%, 7.4%;
# - a prior weight of 10 in the grid too: 13.7%, 6.7% (B300 and H200 pick 1, B200 0.1).
# With MiniMax-M2's q/k-norm all-reduce under TP in the perf model (ModelArch.
# tp_norm_allreduces): this compute scale 13.4%, 5.5% (uncalibrated 14.9%, 5.6%); with the
# eager cost calibrated too: 13.7%, 5.5%. What is left in TTFT: B200's MiniMax-M2.5 runs
# (39% of the predictions) come out 11-20% fast from bases fitted on B300 and H200, where the
# same configurations run 3-6% slow; at 32+ clients the 1024-token prompts' TTFT is too fast
# and the 8192-token ones' too slow on every GPU (the burst share each needs: ~0.2 against
# ~0.12); and repeated runs on other vLLM builds disagree (B200 MiniMax-M2.5 nvfp4 TP4 at 4
# clients: TTFT 45 ms on 0.19.0, 100 ms on a nightly; H200's TP4 rows are 0.16.0, TP8 0.18.0).
# With the later rounds in the first round's order (closed_loop's `chained`, serving.CHAIN:
# the 1024- against 8192-token structure above): this compute scale 12.9%, 5.4%
# (uncalibrated 12.7%, 5.5%); per GPU TTFT B200 13.6%, B300 10.1%, H200 10.6%: what is
# left is mostly B200's MiniMax-M2.5 runs (11-23% fast at TP 2-4). With Blackwell's
# prefill attention efficiency fitted in the starting constants too (serving.ATTN_BLACKWELL):
# 12.2%, 5.5% (uncalibrated 12.7%, 5.9%); per GPU TTFT B200 13.1%, B300 10.4%, H200 9.5%.
# Tried: the softmax's exponentials at the SFU rate NVIDIA publishes (B200 5, B300 10.7 T/s;
# bench/perfmodel_vs_serving.py) in series with attention's tensor cores: 13.7%, 5.5% (uncal.
# 11.6%, 5.6%); per GPU TTFT B200 14.7%, B300 10.6%, H200 9.8%. The starting constants gain,
# the calibration loses: B200 calibrated on Kimi-K2.5 (compute x0.71) 18.2%, on gpt-oss-120b
# (x1.12) 15.0%, against 13.4% and 13.7% without. B200's MiniMax-M2.5 residual is in its
# 1024-token rows, where attention is small: from the B300 + H200 base (uncalibrated) they
# run 19-37% fast per (precision, TP 2-4), at every concurrency, and stay so with the
# exponentials (20-40%); the 8192-token ones go from 3-17% fast to 16% fast to 1% slow.
# Kept: a second factor, on the TP all-reduces' time (ALLREDUCE_SCALE), fitted with
# the compute scale to the same runs (one model at TP 1-8 pins it): 11.8%, 5.6% against
# 12.2%, 5.5%; per GPU TTFT B200 12.2%, B300 10.2%, H200 10.5% (B200 fits x0.98-1.28, B300
# and H200 x0.97-1.07; B200 picks prior 0.1, B300 and H200 1).
CAL_BOUNDS = {COMPUTE_SCALE: (1 / 3, 3.0), ALLREDUCE_SCALE: ALLREDUCE_BOUNDS}  # calibrate's
# The prior: weight x (log(fitted / start))^2 per constant. The weight is a hyperparameter,
# so it is chosen out of sample (nested): for each GPU scored, the weight of this grid
# (decades, fixed before looking) that scores best on the calibrate -> predict task of the
# *other* GPUs, each predicted from a base fitted without the scored GPU either
# (`choose_prior_weight`).
PRIOR_GRID = (0.0, 0.1, 1.0)


def fit_base(rows: pd.DataFrame) -> dict[str, float]:
    """The starting constants fitted to `rows` (bench/perfmodel_vs_serving.py's fit), with
    the compute and all-reduce scales a calibration fits at 1."""
    return fit_model(rows, START, BOUNDS) | {COMPUTE_SCALE: 1.0, ALLREDUCE_SCALE: 1.0}


def calibrate_gpu(
    rows: pd.DataFrame, gpu: str, base: dict, weight: float, with_base: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(errors after calibrating, errors with `base` alone or None) of `gpu`'s runs, over each
    model measured there: calibrate on that model's low-concurrency runs, predict the rest."""
    parts, uncalibrated = [], []
    for model in sorted(rows[rows.gpu == gpu].model.unique()):
        got = calibrated(rows, gpu, model, base, weight, with_base)
        if got is not None:
            parts.append(got[0])
            uncalibrated.append(got[1])
    return pd.concat(parts), (pd.concat(uncalibrated) if with_base else None)


def score(j: pd.DataFrame) -> float:
    """What picks the prior weight: median |error| of TTFT plus TPOT's."""
    return float(np.median(j.ttft_err) + np.median(j.tpot_err))


def choose_prior_weight(rows: pd.DataFrame, gpu: str, bases: dict) -> float:
    """The weight in PRIOR_GRID that scores best on the other GPUs' calibrate -> predict task,
    each from a base fitted on neither `gpu`'s rows nor its own; never sees `gpu`'s rows."""
    others = [h for h in sorted(rows.gpu.unique()) if h != gpu]
    scores = {}
    for w in PRIOR_GRID:
        inner = []
        for h in others:
            key = frozenset((gpu, h))
            if key not in bases:
                bases[key] = fit_base(rows[~rows.gpu.isin(key)])
            inner.append(calibrate_gpu(rows, h, bases[key], w)[0])
        scores[w] = score(pd.concat(inner))
    print(
        f"  {gpu:9} prior weight chosen on {', '.join(others)}: "
        + ", ".join(f"{w:g} {v:.3f}" for w, v in scores.items())
        + f" -> {min(scores, key=scores.get):g}",
        flush=True,
    )
    return min(scores, key=scores.get)


def calibrated(
    rows: pd.DataFrame, gpu: str, model: str, base: dict, weight: float, with_base: bool
) -> tuple[pd.DataFrame, pd.DataFrame | None] | None:
    """(errors after calibrating, errors with `base` alone or None) of every run on `gpu` but
    `model`'s low-concurrency ones, calibrating the per-GPU constants on those with prior
    `weight`; None when that model has none there."""
    on_gpu = rows[rows.gpu == gpu]
    train = on_gpu[(on_gpu.model == model) & (on_gpu.c <= LOW_CONCURRENCY)]
    if train.empty:
        return None
    theta = fit_model(train, base, CAL_BOUNDS, prior_weight=weight)
    test = on_gpu.drop(train.index)
    configs = test.drop_duplicates(CONFIG)
    after = errors(test, predict(configs, theta))
    after = after.assign(calibrated_on=model, scale=theta[COMPUTE_SCALE], ar=theta[ALLREDUCE_SCALE])
    if not with_base:
        return after, None
    return after, errors(test, predict(configs, base)).assign(calibrated_on=model)


def signed_table(j: pd.DataFrame) -> None:
    """Signed median errors per (GPU, model, precision, TP): + is a prediction too slow."""
    print("signed median error per (GPU, model, precision, TP), all calibrating models:")
    for k, g in j.groupby(["gpu", "model", "quant", "tp"]):
        ttft, tpot = np.median(g.ttft_pred / g.ttft_ms - 1), np.median(g.tpot_pred / g.tpot_ms - 1)
        name = " ".join(str(x) for x in k)
        print(f"  {name:34} n={len(g):4d}  TTFT {ttft:+6.1%}  TPOT {tpot:+6.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args()
    rows, _ = load_rows()
    parts, uncalibrated, bases = [], [], {}
    for gpu in sorted(rows.gpu.unique()):
        weight = choose_prior_weight(rows, gpu, bases)
        base = fit_base(rows[rows.gpu != gpu])  # never saw this GPU
        j, u = calibrate_gpu(rows, gpu, base, weight, with_base=True)
        parts.append(j)
        uncalibrated.append(u)
        for model, g in j.groupby("calibrated_on"):
            print(
                f"  {gpu:9} calibrated on {model:14} ({LOW_CONCURRENCY} clients or fewer, prior "
                f"{weight:g}; compute x{g.scale.iloc[0]:.2f}, all-reduce x{g.ar.iloc[0]:.2f}): "
                f"{len(g):4d} other runs, TTFT "
                f"{np.median(g.ttft_err):6.1%}, "
                f"TPOT {np.median(g.tpot_err):6.1%}",
                flush=True,
            )
    j, u = pd.concat(parts), pd.concat(uncalibrated)
    signed_table(j)
    print("per GPU (all calibrating models):")
    for gpu, g in j.groupby("gpu"):
        print(
            f"  {gpu:9} n={len(g):4d}  TTFT {np.median(g.ttft_err):6.1%}  TPOT {np.median(g.tpot_err):6.1%}"
        )
    ttft, tpot = float(np.median(j.ttft_err)), float(np.median(j.tpot_err))
    print(
        f"uncalibrated (the starting constants alone, same runs): TTFT "
        f"{np.median(u.ttft_err):.1%}, TPOT {np.median(u.tpot_err):.1%}"
    )
    ok = tpot <= TPOT_TARGET and ttft <= TTFT_TARGET
    per_gpu = " ".join(
        f"{g.split('-')[0].lower()}_tpot={np.median(x.tpot_err):.3f}" for g, x in j.groupby("gpu")
    )
    print(f"RESULT ttft={ttft:.3f} tpot={tpot:.3f} {per_gpu} predictions={len(j)} pass={int(ok)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
