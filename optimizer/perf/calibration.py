"""Fit the perf model's efficiency and overhead factors of one GPU type to a profile.

Pure: a `Profile` (engine points + microbenchmarks) and the GPU's spec in, the profile's
`Calibration` fields out (`calib_from_profile` turns them into a `Calib`).

Model fitted (the one `latency.build_step_model` and `StepModel.time_s` compute):
  step(new, kv, pairs, seqs) = o + so seqs + floor + max(mem / be, lin / ce + attn / ae) + comm
  prefill point (n tokens, first token):     y = po + sum over its chunks of step(..., 1)
  busy point (CPU build: a first token of a request that found the engine awake): the same
  with pb in place of po (`Calib.busy_prefill_overhead_s`); po - pb, the idle engine's
  wake-up, scales with its idle time as the profile's idle points do (`idle_wake_curve`)
  decode point (c streams started together): y = step(c, c * ctx, c * ctx, c), ctx = p + out/2
where `mem`, `lin`, `attn` are the step's bytes and FLOPs over the spec's peak rates
(efficiency 1), be/ce/ae the bandwidth/compute/attention efficiencies, `floor` the minimum
time of the step's kernels (`latency.step_fixed_s`, 0 on the CPU build), o the rest of the
per-step and po the per-request overhead, so the per-sequence time of a step (fitted on the
CPU build only, `Calib.seq_overhead_s`: there a decode step grows with its sequences, not with
their context; 0 elsewhere). ae keeps the default attention-to-GEMM ratio.

For each (ce, be) on a log grid the overheads (o, po, pb, so) enter linearly: they are solved by
non-negative weighted least squares on relative errors; a small penalty pulls (ce, be)
toward the microbenchmark priors (measured GEMM rate / spec, measured copy rate / spec),
which decide the factors the engine points cannot (a tiny model is overhead-bound).
Points the first fit misses far more than the rest (`outliers`: a measurement the host
disturbed) are left out of a second fit.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from planner.catalog.gpus import GpuSpec
from planner.optimizer.perf.calib import Calib
from planner.optimizer.perf.fitpoints import (
    FitPoint,
    fit_points,
    predict,
)
from planner.schemas.profile import Calibration, Profile

# Bounds of the efficiency search (the schema allows (0, 2]).
EFF_MIN, EFF_MAX = 1e-4, 2.0
PRIOR_WEIGHT = 1e-4  # a prior's squared log-ratio vs one point's squared rel. error: decides flat directions only
# A point whose relative error after the first fit exceeds both OUTLIER_REL and
# OUTLIER_X x the median is left out of the refit (a measurement the host disturbed, e.g. a
# 2-core machine whose HTTP process starved: decode x4/x8 read 2-3x their neighbours).
OUTLIER_REL, OUTLIER_X = 0.25, 3.0


def _overhead_columns(points: list[FitPoint], per_seq: bool) -> np.ndarray:
    """What each point's latency holds of (o, po, pb, so): its steps, 1 if a prefill (po) or a
    busy point (pb), and the sequences over its steps; so's column is 0 unless `per_seq` and
    some step holds several sequences (else so is o under another name)."""
    cols = np.array(
        [
            [
                len(p.steps),
                1.0 if p.kind == "prefill" else 0.0,
                1.0 if p.kind == "busy" else 0.0,
                sum(s.seqs for s in p.steps),
            ]
            for p in points
        ]
    )
    if not (per_seq and any(s.seqs != 1 for p in points for s in p.steps)):
        cols[:, 3] = 0.0
    return cols


def _overheads(cols: np.ndarray, g: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative (o, po, pb, so) minimising the squared relative error given the rest `g`:
    the least-squares solution over each subset of the columns (`_overhead_columns`) that has
    no negative part (exact NNLS for four unknowns; a column of zeros stays out, at 0)."""
    w = 1.0 / y
    aw, rw = cols * w[:, None], (y - g) * w
    free = [j for j in range(cols.shape[1]) if aw[:, j].any()]
    best, best_err = np.zeros(cols.shape[1]), float(rw @ rw)
    for mask in range(1, 1 << len(free)):
        use = [j for k, j in enumerate(free) if mask >> k & 1]
        a = aw[:, use]
        sol = (
            np.array([a[:, 0] @ rw / (a[:, 0] @ a[:, 0])])
            if len(use) == 1
            else np.linalg.lstsq(a, rw, rcond=None)[0]
        )
        if (sol < 0).any():
            continue
        err = float(np.sum((a @ sol - rw) ** 2))
        if err < best_err:
            best, best_err = np.zeros(cols.shape[1]), err
            best[use] = sol
    return best


def _objective(cols, y, g, ce, be, ce0, be0) -> tuple[float, np.ndarray]:
    ovh = _overheads(cols, g, y)
    pred = g + cols @ ovh
    err = float(np.sum(((pred - y) / y) ** 2))
    err += PRIOR_WEIGHT * (math.log(ce / ce0) ** 2 + math.log(be / be0) ** 2)
    return err, ovh


def fit_engine(
    points: list[FitPoint], ce0: float, be0: float, per_seq: bool = False
) -> tuple[float, float, float, float, float, float | None, np.ndarray]:
    """(ce, be, o, po, so, pb, each point's relative error) by a log grid search refined
    three times around the best; so (s per sequence per step) is fitted only where `per_seq`,
    pb (the busy points' request overhead) only where there are busy points (else None)."""
    y = np.array([p.y_s for p in points])
    cols = _overhead_columns(points, per_seq)  # the same for every (ce, be)
    best = (math.inf, ce0, be0, np.zeros(cols.shape[1]))
    lo_c = math.log(EFF_MIN)
    hi_c = math.log(EFF_MAX)
    lo_b = math.log(EFF_MIN)
    hi_b = math.log(EFF_MAX)
    for _ in range(4):
        for lc in np.linspace(lo_c, hi_c, 25):
            for lb in np.linspace(lo_b, hi_b, 25):
                ce, be = math.exp(lc), math.exp(lb)
                g = predict(points, ce, be, 0.0, 0.0, 0.0, 0.0)
                err, ovh = _objective(cols, y, g, ce, be, ce0, be0)
                if err < best[0]:
                    best = (err, ce, be, ovh)
        _, ce, be = best[:3]
        span_c, span_b = (hi_c - lo_c) / 8, (hi_b - lo_b) / 8
        lo_c, hi_c = (
            max(math.log(EFF_MIN), math.log(ce) - span_c),
            min(math.log(EFF_MAX), math.log(ce) + span_c),
        )
        lo_b, hi_b = (
            max(math.log(EFF_MIN), math.log(be) - span_b),
            min(math.log(EFF_MAX), math.log(be) + span_b),
        )
    _, ce, be, ovh = best
    o, po, pb, so = (float(x) for x in ovh)
    pb_or_none = pb if cols[:, 2].any() else None
    rel = np.abs(predict(points, ce, be, o, po, so, pb_or_none) - y) / y
    return ce, be, o, po, so, pb_or_none, rel


def outliers(rel: np.ndarray) -> set[int]:
    """Indices of the points a fit misses (`rel`: relative errors) by more than OUTLIER_REL
    and OUTLIER_X x the median miss: the worst of them, at most a third; none of a fit of < 4."""
    if len(rel) < 4:
        return set()
    bound = max(OUTLIER_REL, OUTLIER_X * float(np.median(rel)))
    worst = [int(i) for i in np.argsort(-rel) if rel[i] > bound]
    return set(worst[: len(rel) // 3])


def one_overhead_unless_split(points: list[FitPoint]) -> list[FitPoint]:
    """`points`, with the busy ones fitted as prefills (one request overhead, as on a GPU)
    unless there are idle prefill points too: a split needs both sides."""
    if any(p.kind == "prefill" for p in points):
        return points
    return [replace(p, kind="prefill") if p.kind == "busy" else p for p in points]


def _clip(x: float) -> float:
    return min(EFF_MAX, max(EFF_MIN, x))


def _set_compute(out: Calibration, ce: float, base: Calib) -> None:
    """The fitted bf16 GEMM efficiency, and the attention and fp8/fp4 GEMM efficiencies
    scaled by the same factor: one compute scale for the GPU, as a team's runs of one
    precision cannot pin the others (bench/perfmodel_calibrated.py fits this one scale)."""
    scale = ce / base.compute_efficiency
    out.compute_efficiency = ce
    out.attn_efficiency = _clip(base.attn_efficiency * scale)
    out.fp8_compute_efficiency = _clip(base.fp8_compute_efficiency * scale)
    out.fp4_compute_efficiency = _clip(base.fp4_compute_efficiency * scale)


def priors(profile: Profile, gpu: GpuSpec, base: Calib) -> tuple[float, float]:
    """(compute, bandwidth) efficiency from the microbenchmarks, else the defaults."""
    hw = profile.hardware
    ce0, be0 = base.compute_efficiency, base.bandwidth_efficiency
    gemm = hw.gemm_tflops.get("bf16") or hw.gemm_tflops.get("fp16")
    if gemm is not None and gemm.median > 0:
        ce0 = _clip(gemm.median / gpu.bf16_tflops)
    if hw.device_copy_gbps is not None and hw.device_copy_gbps.median > 0:
        be0 = _clip(hw.device_copy_gbps.median / gpu.memory_bandwidth_gbps)
    return ce0, be0


def _median(xs: list[float]) -> float | None:
    return float(np.median(xs)) if xs else None


# p90 - p10 of a normal distribution, in standard deviations
P90_P10_SIGMAS = 2.563


def jitter_cv(profile: Profile) -> float | None:
    """Step-time coefficient of variation from the profile's measured spreads: for every
    engine point (prefill latency, decode TPOT) its (p90 - p10) / median over the width of
    a normal's p10-p90 in standard deviations; the median over the points. None: no points."""
    cvs = []
    for run in profile.engine:
        if run.status != "ok":
            continue
        stats = [p.latency_s for p in run.prefill] + [d.tpot_s for d in run.decode]
        cvs += [s.spread / s.median / P90_P10_SIGMAS for s in stats if s.median > 0 and s.n > 1]
    return float(np.median(cvs)) if cvs else None


# a wake-up smaller than this share of the TTFT is noise, not a curve worth scaling
MIN_WAKE_REL = 0.05
MAX_WAKE_SHARE = 4.0


def idle_wake_curve(profile: Profile) -> list[tuple[float, float]] | None:
    """How the idle wake-up scales with the time the engine was idle: (idle s, share) from
    the idle points of the profile's first run that has them, share = (TTFT after that
    quiet - TTFT after the shortest) / (the same after the prefill points' quiet), so share
    1 is the wake the prefill points carry (`prefill_overhead_s` less the busy overhead).
    None without idle points, or where the wake at the prefill points' quiet is noise."""
    for run in profile.engine:
        pts = sorted(run.idle, key=lambda p: p.idle_s)
        if run.status != "ok" or len(pts) < 2 or run.prefill_idle_s is None:
            continue
        gaps = np.array([p.idle_s for p in pts])
        # The trimmed mean, where the profile has it: after a quiet of tens of ms the CPU
        # build's TTFT is bimodal (quiet-host profiles of bench/simulator_vs_vllm_cpu, 128
        # tokens after 50 ms: median of 5 at 5.25 ms in one, 8.08 ms in the next), so a
        # median picks one mode, where the simulator's share stands for their mixture; and
        # one stalled sample (0.3 s: mean of 9 13.04 ms, median 10.86) moves a plain mean.
        ttft = np.array([p.latency_s.trimmed_mean or p.latency_s.median for p in pts])
        wake = ttft - ttft[0]
        at_ref = float(np.interp(run.prefill_idle_s, gaps, wake))
        if at_ref < MIN_WAKE_REL * float(np.interp(run.prefill_idle_s, gaps, ttft)):
            return None
        share = np.clip(wake / at_ref, 0.0, MAX_WAKE_SHARE)
        return [(float(g), round(float(w), 3)) for g, w in zip(gaps, share, strict=True)]
    return None


def calibrate(profile: Profile, gpu: GpuSpec, base: Calib) -> Calibration:
    """The fitted Calibration of `profile` (factors it cannot fit stay None: defaults apply)."""
    ce0, be0 = priors(profile, gpu, base)
    hw = profile.hardware
    ok = [r for r in profile.engine if r.status == "ok"]
    init = [r.cold_start_s - (r.weight_load_s or 0.0) for r in ok if r.cold_start_s is not None]
    out = Calibration(  # the microbenchmarks' priors where they moved the defaults
        compute_efficiency=ce0 if ce0 != base.compute_efficiency else None,
        bandwidth_efficiency=be0 if be0 != base.bandwidth_efficiency else None,
        h2d_gbps=hw.h2d_pinned_gbps.median if hw.h2d_pinned_gbps else None,
        d2h_gbps=hw.d2h_pinned_gbps.median if hw.d2h_pinned_gbps else None,
        disk_read_gbps=hw.disk_read_gbps.median if hw.disk_read_gbps else None,
        engine_init_s=_median([max(0.0, x) for x in init]),
        step_jitter_cv=jitter_cv(profile),
        points=0,
        source="microbenchmarks" if (hw.gemm_tflops or hw.device_copy_gbps) else "defaults",
    )
    pts = fit_points(profile, gpu, base)
    prior = "microbenchmark" if out.source == "microbenchmarks" else "default"
    out.runs = [
        f"{r.model} tp{r.tp} {r.quantization or 'bf16'}: {len(r.decode) + len(r.prefill)} points"
        + (f" ({r.notes[0]})" if r.notes and r.notes[0].startswith("imported") else "")
        for r in ok
        if r.arch is not None
        and (r.decode or r.prefill)
        and not any(n.startswith("not calibrated:") for n in r.notes)
    ]
    from planner.optimizer.perf.calib_imported import fit_imported, not_calibrating
    from planner.optimizer.perf.calib_loop import loop_points

    loop = loop_points(profile)
    out.excluded = not_calibrating(profile)
    if loop:  # serving runs: the closed loop, with the engine points alike
        start = replace(base, compute_efficiency=ce0, bandwidth_efficiency=be0)
        fit_imported(out, loop, pts, gpu, start, prior)
    elif len(pts) >= 2:
        per_seq = gpu.arch == "cpu"  # Calib.seq_overhead_s: the CPU build's per-sequence cost
        pts = one_overhead_unless_split(pts)
        ce, be, o, po, so, pb, rel = fit_engine(pts, ce0, be0, per_seq)
        drop = outliers(rel)
        if drop:  # refit without the points the host disturbed
            pts = one_overhead_unless_split([p for i, p in enumerate(pts) if i not in drop])
            ce, be, o, po, so, pb, rel = fit_engine(pts, ce0, be0, per_seq)
        if per_seq:
            out.seq_overhead_s = so
        out.busy_prefill_overhead_s = pb
        if pb is not None:  # the wake-up it splits off scales with the idle time
            out.idle_wake_curve = idle_wake_curve(profile)
        _set_compute(out, ce, base)
        out.bandwidth_efficiency = be
        out.step_overhead_s = o
        out.prefill_overhead_s = po
        out.residual_rel = float(np.median(rel))
        out.points = len(pts)
        left_out = f", {len(drop)} outlier(s) left out" if drop else ""
        out.source = f"engine fit ({len(pts)} points{left_out}) with {prior} priors"
    return out
