"""Perf model vs measured MLP-layer times (vidur per-operator profiles, A100 / H100 / A40).

For every (model, TP, num_tokens) row of vidur's mlp.csv the measured time is the sum of the
medians of mlp_up_proj (fused gate+up GEMM), mlp_act (SiLU * up) and mlp_down_proj. The
prediction is the perf model's operator roofline (`linear_s`, `elementwise_s`): each GEMM is
the slower of streaming its weights and doing its FLOPs at the GPU's efficiency factors.

Two figures per GPU: with the spec-sheet defaults, and with ONE compute efficiency and ONE
bandwidth efficiency fitted per GPU type to these per-operator measurements (a calibration
from per-op data, as a profile would do; not a fit to end-to-end latencies). RESULT uses the
fitted factors. Decode-sized: num_tokens <= 128; prefill-sized: num_tokens >= 512.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from planner.catalog.gpus import resolve_gpu
from planner.optimizer.perf import default_calib
from planner.optimizer.perf.latency import elementwise_s, linear_s

DATA = Path(__file__).parent / "data" / "vidur" / "profiling" / "compute"
GPUS = {"a100": "A100-80GB-SXM", "h100": "H100-SXM", "a40": "A40"}  # vidur's machines
COL = "time_stats.{}.median"  # ms


def load(gpu_dir: str) -> pd.DataFrame:
    frames = []
    for f in sorted((DATA / gpu_dir).glob("*/*/mlp.csv")):
        d = pd.read_csv(f)
        d["model"] = f.parent.name
        frames.append(d)
    d = pd.concat(frames, ignore_index=True)
    d["measured_s"] = (
        sum(d[COL.format(k)] for k in ("mlp_up_proj", "mlp_act", "mlp_down_proj")) / 1e3
    )
    return d


def predict(d: pd.DataFrame, gpu, calib) -> np.ndarray:
    out = np.empty(len(d))
    for i, (n, h, inter, tp) in enumerate(
        zip(d.num_tokens, d.n_embd, d.n_expanded_embd, d.num_tensor_parallel_workers, strict=True)
    ):
        w = int(inter) // int(tp)  # intermediate width per GPU
        up = linear_s(gpu, calib, int(n), int(h), 2 * w)  # fused gate + up
        act = elementwise_s(gpu, calib, n * 3 * w * 2.0)  # read gate, up; write product (16-bit)
        down = linear_s(gpu, calib, int(n), w, int(h))
        out[i] = up + act + down
    return out


def mdape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.median(np.abs(pred - meas) / meas))


def fit(d: pd.DataFrame, gpu, base) -> tuple[float, float]:
    """Grid search of (compute, bandwidth) efficiency minimizing the mean of the decode-sized
    and prefill-sized median errors (each regime weighs the same whatever its row count)."""
    meas = d.measured_s.to_numpy()
    dec = (d.num_tokens <= 128).to_numpy()
    best = (np.inf, base.compute_efficiency, base.bandwidth_efficiency)
    for ce in np.arange(0.40, 1.001, 0.02):
        for be in np.arange(0.50, 1.001, 0.02):
            c = dataclasses.replace(
                base, compute_efficiency=float(ce), bandwidth_efficiency=float(be)
            )
            pred = predict(d, gpu, c)
            err = (mdape(pred[dec], meas[dec]) + mdape(pred[~dec], meas[~dec])) / 2
            if err < best[0]:
                best = (err, float(ce), float(be))
    return best[1], best[2]


def main() -> int:
    results = {}
    for key, name in GPUS.items():
        gpu = resolve_gpu(name)
        d = load(key)
        d = d[(d.num_tokens <= 128) | (d.num_tokens >= 512)].reset_index(drop=True)
        meas = d.measured_s.to_numpy()
        base = default_calib(gpu.arch)
        spec_err = mdape(predict(d, gpu, base), meas)
        ce, be = fit(d, gpu, base)
        cal = dataclasses.replace(base, compute_efficiency=ce, bandwidth_efficiency=be)
        pred = predict(d, gpu, cal)
        dec = (d.num_tokens <= 128).to_numpy()
        print(
            f"{key} ({name}): {len(d)} rows, models {sorted(d.model.unique())}, TP {sorted(d.num_tensor_parallel_workers.unique())}"
        )
        print(
            f"  spec-sheet defaults (compute {base.compute_efficiency:.2f}, bandwidth {base.bandwidth_efficiency:.2f}): MdAPE {spec_err:.1%}"
        )
        print(
            f"  fitted from these per-op times: compute {ce:.2f}, bandwidth {be:.2f}: MdAPE {mdape(pred, meas):.1%}"
            f" (decode-sized {mdape(pred[dec], meas[dec]):.1%}, prefill-sized {mdape(pred[~dec], meas[~dec]):.1%})"
        )
        for tp in sorted(d.num_tensor_parallel_workers.unique()):
            m = (d.num_tensor_parallel_workers == tp).to_numpy()
            print(f"    TP {tp}: MdAPE {mdape(pred[m], meas[m]):.1%}")
        results[key] = (mdape(pred, meas), spec_err)
    ok = all(v[0] <= 0.15 for v in results.values())
    print(
        "RESULT "
        + " ".join(f"{k}_mdape={v[0]:.3f}" for k, v in results.items())
        + " "
        + " ".join(f"{k}_spec_mdape={v[1]:.3f}" for k, v in results.items())
        + f" pass={int(ok)}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
