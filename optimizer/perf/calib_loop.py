"""Fit a GPU's factors to closed-loop serving runs (`planner profile import`) and the
profiler's own engine points alike.

An imported run is a serving benchmark: `concurrency` clients sending fixed-length requests
back to back, mean TTFT and TPOT measured. The perf model predicts it as `planner estimate`
does (`instance_perf` with vLLM's defaults, `benchmark_loop`); the
profiler's own points keep their step-level model (`calibration.predict`). Fitted: compute
and bandwidth efficiency, step and request overhead, and where a run used TP > 1 a factor on
the TP all-reduces' time (`ALLREDUCE_SCALE`, `calib.with_allreduce_scale`), by coordinate
search on a shrinking multiplicative grid, minimising the mean clipped |log ratio| over every
measured number.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from planner.catalog.gpus import GpuSpec
from planner.catalog.models import ModelArch
from planner.optimizer.perf.calib import Calib, with_allreduce_scale
from planner.optimizer.perf.fitpoints import FitPoint, is_imported, predict
from planner.schemas.profile import Profile

FITTED = {  # Calib field -> bounds
    "compute_efficiency": (0.05, 1.5),
    "bandwidth_efficiency": (0.1, 1.5),
    "step_overhead_s": (1e-6, 0.05),
    "prefill_overhead_s": (1e-4, 1.0),
}
# One factor on every TP all-reduce's time (not a Calib field): runs of one model at several
# TP pin it. Serving runs on B200 (bench/perfmodel_calibrated.py) fit x0.98-1.28. At 0.5 a
# link's efficiency is twice the shipped one: PCIe's 1.5, within Calibration's bound of 2.
ALLREDUCE_SCALE = "allreduce_scale"
ALLREDUCE_BOUNDS = (0.5, 3.0)
CLIP = 1.5  # |log ratio| a single point counts for at most


@dataclass(frozen=True)
class LoopPoint:
    """One measured closed-loop run of one model."""

    arch: ModelArch
    quantization: str
    tp: int
    prompt_tokens: int
    output_tokens: int
    clients: int
    ttft_s: float
    tpot_s: float


def loop_points(profile: Profile) -> list[LoopPoint]:
    """The closed-loop points of the profile's imported runs (those with an architecture)."""
    out = []
    for r in profile.engine:
        if r.status != "ok" or r.arch is None or not is_imported(r):
            continue
        for d in r.decode:
            if d.ttft_s is None or d.tpot_s.median <= 0 or d.ttft_s.median <= 0:
                continue
            out.append(LoopPoint(r.arch, r.quantization or "bf16", r.tp, d.prompt_tokens,
                                 d.output_tokens, d.concurrency, d.ttft_s.median,
                                 d.tpot_s.median))  # fmt: skip
    return out


def loop_link(gpu: GpuSpec) -> str:
    """The interconnect an imported run's TP all-reduces are predicted over."""
    return "nvlink" if gpu.nvlink_gbps and "SXM" in gpu.name.upper() else "pcie"


def loop_predict(points: list[LoopPoint], gpu: GpuSpec, cal: Calib) -> np.ndarray:
    """(TTFT s, TPOT s) of each point under `cal`, shape (n, 2)."""
    from planner.optimizer.perf import benchmark_loop, instance_perf

    link = loop_link(gpu)
    out = []
    for p in points:
        perf = instance_perf(p.arch, p.quantization, gpu, p.tp, interconnect=link, calib=cal)
        r = benchmark_loop(perf, p.prompt_tokens, p.output_tokens, p.clients)
        out.append((r.ttft_s, r.tpot_s))
    return np.array(out, dtype=float).reshape(-1, 2)


def _loss(pred: np.ndarray, y: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.abs(np.log(pred / y))
    return float(np.mean(np.minimum(np.nan_to_num(r, nan=CLIP, posinf=CLIP), CLIP)))


def fit_loop(
    loop: list[LoopPoint], own: list[FitPoint], gpu: GpuSpec, base: Calib, sweeps: int = 4
) -> tuple[dict[str, float], np.ndarray]:
    """(fitted Calib fields and, where a run used TP > 1, `ALLREDUCE_SCALE`; each measured
    number's relative error after the fit): the imported runs' TTFT and TPOT and the
    profiler's own points together."""
    y_loop = np.array([(p.ttft_s, p.tpot_s) for p in loop], dtype=float).reshape(-1, 2)
    y_own = np.array([p.y_s for p in own])
    bounds = dict(FITTED)
    if any(p.tp > 1 for p in loop):
        bounds[ALLREDUCE_SCALE] = ALLREDUCE_BOUNDS

    def evaluate(theta: dict[str, float]) -> tuple[float, np.ndarray]:
        ar = theta.get(ALLREDUCE_SCALE, 1.0)
        cal = with_allreduce_scale(replace(base, **{k: theta[k] for k in FITTED}), ar)
        pred = loop_predict(loop, gpu, cal).ravel()
        if own:
            o, po = theta["step_overhead_s"], theta["prefill_overhead_s"]
            ce, be = theta["compute_efficiency"], theta["bandwidth_efficiency"]
            pred = np.concatenate([pred, predict(own, ce, be, o, po, ar=ar)])
        y = np.concatenate([y_loop.ravel(), y_own])
        return _loss(pred, y), np.abs(pred / y - 1)

    theta = {k: min(hi, max(lo, getattr(base, k))) for k, (lo, hi) in FITTED.items()}
    if ALLREDUCE_SCALE in bounds:
        theta[ALLREDUCE_SCALE] = 1.0
    best, _ = evaluate(theta)
    step = 0.5
    for _ in range(sweeps):
        for k, (lo, hi) in bounds.items():
            for mult in (1 + step, 1 / (1 + step), (1 + step) ** 2, 1 / (1 + step) ** 2):
                cand = {**theta, k: min(hi, max(lo, theta[k] * mult))}
                v, _ = evaluate(cand)
                if v < best - 1e-12:
                    best, theta = v, cand
        step /= 2
    _, rel = evaluate(theta)
    return theta, rel


def median_rel(rel: np.ndarray) -> float:
    return float(np.median(rel)) if len(rel) else math.nan
