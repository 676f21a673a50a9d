"""A profile's imported serving runs fitted into its `Calibration` (`calibration.calibrate`
calls `fit_imported`): the GPU's factors where the runs hold several models, each model's
own factors on top (`calib_loop.calibrate_loop` for both), and what was left out.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from planner.catalog.gpus import GpuSpec
from planner.optimizer.perf.calib import Calib
from planner.schemas.profile import Calibration, Profile


def not_calibrating(profile: Profile) -> list[str]:
    """The imported runs calibration leaves out, each with the reason `profile import` gave."""
    out = []
    for r in profile.engine:
        why = [n.removeprefix("not calibrated: ") for n in r.notes if n.startswith("not calib")]
        if why:
            out.append(f"{r.model} tp{r.tp} {r.quantization or 'bf16'}: {why[0]}")
    return out


def fit_imported(out: Calibration, loop, pts, gpu: GpuSpec, start: Calib, prior: str) -> None:
    """The closed-loop fit of imported runs (`calib_loop`) into `out`. The points the prior
    predicts no finite time for are left out and named. The GPU's factors are fitted only
    where the runs hold several models (or the profiler's own points), checked leave one
    model out: one model's runs cannot tell the GPU's factors from that model's own error.
    Each model's factors on top of the GPU's are fitted on its runs and hold for it alone
    (`Calibration.models`)."""
    from collections import Counter

    from planner.optimizer.perf.calib_loop import (
        LoopProblem,
        calibrate_loop,
        gemm_classes,
        loop_link,
        loop_predict,
    )
    from planner.schemas.profile import CrossCheck, FactorFit, ModelFactors

    finite = np.isfinite(loop_predict(loop, gpu, start)).all(axis=1)
    dropped = Counter(p.run for p, ok in zip(loop, finite, strict=True) if not ok)
    out.excluded += [
        f"{run}: {n} point(s) the perf model predicts no finite time for (they do not fit its GPUs)"
        for run, n in dropped.items()
    ]
    loop = [p for p, ok in zip(loop, finite, strict=True) if ok]
    if not loop:
        return
    models = sorted({p.arch.name for p in loop})
    gpu_cal, x = start, {}
    if len(models) >= 2 or pts:
        got = calibrate_loop(LoopProblem(loop, pts, gpu, start))
        gpu_cal, x = got.calib, got.accepted
        out.factors += [FactorFit(**f) for f in got.factors]
        out.checks += [CrossCheck(**c) for c in got.checks]
        out.notes += got.notes
        _set_gpu_fields(out, gpu_cal, start, x, loop_link(gpu))
    else:
        out.notes.append(
            f"one model's runs ({models[0]}): the factors fitted hold for it alone; other "
            f"models keep the GPU's {prior} factors (a second model's runs calibrate the GPU)"
        )
    for m in models:
        mine = [p for p in loop if p.arch.name == m]
        got = calibrate_loop(LoopProblem(mine, [], gpu, gpu_cal))
        fitted = {k: v for k, v in got.accepted.items() if abs(math.log(v)) > 1e-9}
        if fitted:
            gemm = sorted(gemm_classes(mine, gpu))
            out.models.append(ModelFactors(model=m, factors=fitted, gemm=gemm))
        out.factors += [FactorFit(**f, model=m) for f in got.factors]
        out.checks += [CrossCheck(**c, model=m) for c in got.checks]
        out.notes += [f"{m}: {n}" for n in got.notes]
    final = replace(
        gpu_cal,
        model_factors=tuple(
            (m.model, tuple(sorted(m.factors.items())), tuple(m.gemm)) for m in out.models
        ),
    )
    y = np.array([(p.ttft_s, p.tpot_s) for p in loop])
    rel = np.abs(loop_predict(loop, gpu, final) / y - 1).ravel()
    out.residual_rel = float(np.median(rel[np.isfinite(rel)])) if np.isfinite(rel).any() else 0.0
    out.points = len(pts) + 2 * len(loop)
    fitted = [
        f"{f.model or 'GPU'} {f.name} x{f.factor:.2f}"
        for f in out.factors
        if f.status == "fitted" and f.factor != 1.0
    ]
    out.source = (
        f"closed-loop fit ({len(loop)} imported runs' TTFT and TPOT, {len(pts)} engine "
        f"points; {', '.join(fitted) or 'every factor refused'}) with {prior} priors"
    )


def _set_gpu_fields(out: Calibration, cal: Calib, start: Calib, x: dict, link: str) -> None:
    """The Calibration fields of the GPU's fitted factors `x` (`cal`: them laid on `start`)."""
    if "compute" in x:
        for name in (
            "compute_efficiency",
            "attn_efficiency",
            "fp8_compute_efficiency",
            "fp4_compute_efficiency",
        ):
            if getattr(cal, name) != getattr(start, name):
                setattr(out, name, getattr(cal, name))
    if "bandwidth" in x:
        out.bandwidth_efficiency = cal.bandwidth_efficiency
    if "step_overhead" in x:
        out.step_overhead_s = cal.step_overhead_s
    if "request_overhead" in x:
        out.prefill_overhead_s = cal.prefill_overhead_s
    if "allreduce_scale" in x:  # a run used TP > 1: the link it ran over, as the fit predicted it
        if link == "nvlink":
            out.nvlink_efficiency, out.nvlink_latency_s = (
                cal.nvlink_efficiency,
                cal.nvlink_latency_s,
            )
        else:
            out.link_efficiency, out.link_latency_s = cal.link_efficiency, cal.link_latency_s
