"""Fit a GPU's factors to closed-loop serving runs (`planner profile import`) and the
profiler's own engine points alike, as far as the runs identify them.

An imported run is a serving benchmark: `concurrency` clients sending fixed-length requests
back to back, mean TTFT and TPOT measured. The perf model predicts it as `planner estimate`
does (`instance_perf` with vLLM's defaults, `benchmark_loop`); the profiler's own points keep
their step-level model (`fitpoints.predict`).

What is fitted: one factor per GPU-wide term on its prior (the shipped default, or the
microbenchmarks'): compute (the GEMM efficiency of each precision the runs used, and
attention's), memory bandwidth, step overhead, request overhead, and where a run used TP > 1
the TP all-reduces' time (`ALLREDUCE_SCALE`, `calib.with_allreduce_scale`). Terms of
precisions the runs did not use stay at their prior. The fit is a MAP estimate: each
measured number's |log ratio| (robust: soft L1 beyond `DATA_SD`) plus a Gaussian prior on
each factor's log (`FACTORS`), so the factors the runs do not pin stay near their prior.

It checks itself: leave one configuration out (model, quantization, TP, lengths) over the
runs, and leave one model out where they hold several. A factor whose freedom makes those
held-out errors worse (the mean of TTFT's and TPOT's median, each reported) is refused
(kept at its prior, with the reason), and the whole fit is refused when it does worse than
the prior on the held-out runs. (Refusing a factor that worsens either median alone kept
fewer factors and did worse held out: bench/perfmodel_calibrated.py, same model above 8
clients TTFT 12.1%, TPOT 8.2% against 11.2%, 7.0%.) Where the runs hold several models
(the GPU's factors, for the models a team did not measure), worse means worse on any one
left-out model's TTFT or TPOT median: pooled, the models a factor helps hid the one it
hurts (B200, three models' runs: the all-reduce factor fitted on three MoE models' TP runs
moved Llama-3.1-70B's TTFT 10.6% -> 16.6%, bench/perfmodel_calibrated.py's unmeasured
model). Each factor is reported with its uncertainty; a factor at a bound and a fit stopped
on its step limit are noted.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.catalog.gpus import GpuSpec
from planner.catalog.models import ModelArch
from planner.optimizer.perf.calib import (
    ALLREDUCE_SCALE,
    BANDWIDTH,
    COMPUTE,
    EFF_MAX,
    REQUEST,
    STEP,
    Calib,
    apply_factors,
)
from planner.optimizer.perf.calib_check import (
    CROSS_MODEL,
    Check,
    checks_for,
    cross_validate,
    fold_errors,
)
from planner.optimizer.perf.fitpoints import FitPoint, is_imported, predict
from planner.schemas.profile import Profile

# One factor on every TP all-reduce's time (not a Calib field): runs of one model at several
# TP pin it. Serving runs on B200 (bench/perfmodel_calibrated.py) fit x0.98-1.28. At 0.5 a
# link's efficiency is twice the shipped one: PCIe's 1.5, within Calibration's bound of 2.
ALLREDUCE_BOUNDS = (0.5, 3.0)
# factor -> ((low, high) of the factor on its prior, the prior's sd of its log). The sds say
# how far the shipped default may be off on a team's GPUs: GEMM and bandwidth rates are
# measured per operator (x1.5, x1.25); the overheads depend on the host and vLLM build (x3).
FACTORS: dict[str, tuple[tuple[float, float], float]] = {
    COMPUTE: ((1 / 3, 3.0), math.log(1.5)),
    BANDWIDTH: ((0.25, 2.0), math.log(1.25)),
    STEP: ((0.03, 30.0), math.log(3.0)),
    REQUEST: ((0.03, 30.0), math.log(3.0)),
    ALLREDUCE_SCALE: (ALLREDUCE_BOUNDS, math.log(2.0)),
}
# the absolute bounds of the bandwidth efficiency a factor moves (the profile schema's)
BANDWIDTH_BOUNDS = (0.1, 1.5)
DATA_SD = 0.1  # the |log ratio| a measured number counts in full (~10%); beyond it, soft L1
CLIP = 1.5  # |log ratio| a single point counts for at most (a prediction that is not finite)
MAX_NFEV = 40  # function evaluations a fit may take before it is reported as stopped
AT_BOUND = 0.01  # a factor within 1% (log) of a bound is reported at it


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
    run: str = ""  # the run it came from: "model tpN quant"

    @property
    def config(self) -> tuple:
        """What a leave-one-configuration-out fold holds out together (every concurrency)."""
        return (self.arch.name, self.quantization, self.tp, self.prompt_tokens, self.output_tokens)


def run_label(r) -> str:
    return f"{r.model} tp{r.tp} {r.quantization or 'bf16'}"


__all__ = ["ALLREDUCE_BOUNDS", "ALLREDUCE_SCALE", "LoopPoint", "LoopProblem", "calibrate_loop"]


def loop_points(profile: Profile) -> list[LoopPoint]:
    """The closed-loop points of the profile's imported runs that can calibrate (an
    architecture, and no `not calibrated:` note from `profile import`)."""
    out = []
    for r in profile.engine:
        if r.status != "ok" or r.arch is None or not is_imported(r):
            continue
        if any(n.startswith("not calibrated:") for n in r.notes):
            continue
        for d in r.decode:
            if d.ttft_s is None or d.tpot_s.median <= 0 or d.ttft_s.median <= 0:
                continue
            out.append(
                LoopPoint(
                    r.arch,
                    r.quantization or "bf16",
                    r.tp,
                    d.prompt_tokens,
                    d.output_tokens,
                    d.concurrency,
                    d.ttft_s.median,
                    d.tpot_s.median,
                    run_label(r),
                )
            )
    return out


def loop_link(gpu: GpuSpec) -> str:
    """The interconnect an imported run's TP all-reduces are predicted over."""
    return "nvlink" if gpu.nvlink_gbps and "SXM" in gpu.name.upper() else "pcie"


def loop_predict(points: list[LoopPoint], gpu: GpuSpec, cal: Calib) -> np.ndarray:
    """(TTFT s, TPOT s) of each point under `cal`, shape (n, 2); one instance per run."""
    from planner.optimizer.perf import benchmark_loop, instance_perf

    link = loop_link(gpu)
    perfs: dict[tuple, object] = {}
    out = np.empty((len(points), 2))
    for i, p in enumerate(points):
        # keyed by value (ModelArch is frozen): equal archs share one perf, whatever object
        key = (p.arch, p.quantization, p.tp)
        if key not in perfs:
            perfs[key] = instance_perf(
                p.arch, p.quantization, gpu, p.tp, interconnect=link, calib=cal
            )
        r = benchmark_loop(perfs[key], p.prompt_tokens, p.output_tokens, p.clients)
        out[i] = (r.ttft_s, r.tpot_s)
    return out


def gemm_classes(points: list[LoopPoint], gpu: GpuSpec) -> frozenset[str]:
    """The GEMM efficiencies the runs exercise (bf16, fp8, fp4): `latency.
    gemm_peak_and_efficiency`'s branches; a MoE checkpoint in an expert-only format runs its
    other layers in 16 bits."""
    from planner.optimizer.perf.memory import EXPERT_ONLY_QUANTS

    out = set()
    for p in points:
        q = p.quantization
        if q == "fp8" and gpu.fp8_tflops:
            out.add("fp8")
        elif q in ("nvfp4", "mxfp4") and gpu.fp4_tflops:
            out.add("fp4")
        else:
            out.add("bf16")
        if p.arch.is_moe and q in EXPERT_ONLY_QUANTS:
            out.add("bf16")
    return frozenset(out)


def factor_bounds(name: str, base: Calib) -> tuple[float, float]:
    """(low, high) of a factor: its own, within the schema's bounds on the field it moves."""
    (lo, hi), _ = FACTORS[name]
    if name == BANDWIDTH:
        lo = max(lo, BANDWIDTH_BOUNDS[0] / base.bandwidth_efficiency)
        hi = min(hi, BANDWIDTH_BOUNDS[1] / base.bandwidth_efficiency)
    if name == COMPUTE:
        hi = min(hi, EFF_MAX / base.compute_efficiency)
    return lo, hi


@dataclass
class Fit:
    """One MAP fit: the factors, their 1-sd uncertainty (multiplicative), and how it ended."""

    x: dict[str, float]
    sd_log: dict[str, float] = field(default_factory=dict)
    step_limit: bool = False


@dataclass
class LoopProblem:
    """The imported runs (and the profiler's own points) of one GPU, and its prior."""

    loop: list[LoopPoint]
    own: list[FitPoint]
    gpu: GpuSpec
    base: Calib
    classes: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.classes = gemm_classes(self.loop, self.gpu)
        self.y = np.array([(p.ttft_s, p.tpot_s) for p in self.loop], dtype=float).reshape(-1, 2)

    def calib(self, x: dict[str, float]) -> Calib:
        return apply_factors(self.base, x, self.classes)

    def predict(self, x: dict[str, float], idx: np.ndarray) -> np.ndarray:
        return loop_predict([self.loop[i] for i in idx], self.gpu, self.calib(x))

    def _own_log_ratio(self, x: dict[str, float]) -> np.ndarray:
        if not self.own:
            return np.zeros(0)
        cal = self.calib(x)
        pred = predict(
            self.own,
            cal.compute_efficiency,
            cal.bandwidth_efficiency,
            cal.step_overhead_s,
            cal.prefill_overhead_s,
            ar=x.get(ALLREDUCE_SCALE, 1.0),
        )
        return _log_ratio(pred, np.array([p.y_s for p in self.own]))

    def fit(self, names: list[str], idx: np.ndarray) -> Fit:
        """The MAP factors `names` on the points `idx` (and every own point)."""
        if not names:
            return Fit({})
        from scipy.optimize import least_squares

        lo, hi = zip(*(factor_bounds(k, self.base) for k in names), strict=True)
        sd = np.array([FACTORS[k][1] for k in names])
        y = self.y[idx].ravel()

        def residuals(z: np.ndarray) -> np.ndarray:
            x = dict(zip(names, np.exp(z), strict=True))
            data = _log_ratio(self.predict(x, idx).ravel(), y)
            own = self._own_log_ratio(x)
            return np.concatenate([data, own]) / DATA_SD

        def with_prior(z: np.ndarray) -> np.ndarray:
            return np.concatenate([residuals(z), z / sd])

        z0 = np.zeros(len(names))
        res = least_squares(
            with_prior,
            z0,
            bounds=(np.log(lo), np.log(hi)),
            loss="soft_l1",
            diff_step=1e-2,
            max_nfev=MAX_NFEV,
            method="trf",
        )
        x = dict(zip(names, (float(v) for v in np.exp(res.x)), strict=True))
        return Fit(x, self._sd_log(with_prior, res.x, names), step_limit=res.status == 0)

    def _sd_log(self, with_prior, z: np.ndarray, names: list[str]) -> dict[str, float]:
        """Each factor's 1-sd uncertainty (of its log) at the fit `z`: the Gauss-Newton
        covariance of the plain (not robust) residuals, prior rows included, scaled by the
        data residuals' variance where it is over 1 (the model misses by more than DATA_SD)."""
        h = 1e-3
        r0 = with_prior(z)
        jac = np.column_stack([(with_prior(z + h * e) - r0) / h for e in np.eye(len(z))])
        m = len(r0) - len(z)
        scale = max(1.0, float(np.sum(r0[:m] ** 2)) / max(1, m - len(z)))
        try:
            cov = np.linalg.inv(jac.T @ jac) * scale
        except np.linalg.LinAlgError:
            return {k: math.inf for k in names}
        return {k: float(math.sqrt(max(0.0, cov[i, i]))) for i, k in enumerate(names)}


def _log_ratio(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log(pred / y), a non-finite prediction counted as a miss by CLIP."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(pred / y)
    return np.clip(np.nan_to_num(r, nan=CLIP, posinf=CLIP, neginf=-CLIP), -CLIP, CLIP)


@dataclass
class LoopCalibration:
    """What `calibrate_loop` found: the Calib, each factor's fate, the checks, the notes."""

    calib: Calib
    factors: list[dict] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    accepted: dict[str, float] = field(default_factory=dict)


def candidate_factors(points: list[LoopPoint]) -> list[str]:
    """The factors the runs can move: the all-reduces' only where a run used TP > 1."""
    names = [COMPUTE, BANDWIDTH, STEP, REQUEST]
    return names + ([ALLREDUCE_SCALE] if any(p.tp > 1 for p in points) else [])


def across_models(problem: LoopProblem, check: Check, fold: int) -> str:
    """The models a cross-model check's `fold` holds out."""
    return ", ".join(sorted({problem.loop[i].arch.name for i in check.folds[fold]}))


def calibrate_loop(problem: LoopProblem) -> LoopCalibration:
    """Fit, check and refuse (module docstring) the factors of `problem`'s runs."""
    names = candidate_factors(problem.loop)
    checks = checks_for(problem.loop)
    everything = np.arange(len(problem.loop))

    # The GPU's factors (runs of several models) are for the models a team did not measure:
    # they are judged on each model the cross-model check leaves out, TTFT and TPOT apart
    across = next((c for c in checks if c.split == CROSS_MODEL), None)

    def score(ns: list[str]) -> np.ndarray:
        """Held-out (TTFT, TPOT) error over every check."""
        return np.mean([cross_validate(problem, ns, c) for c in checks], axis=0)

    def both(e: np.ndarray) -> str:
        return f"TTFT {e[0]:.1%}, TPOT {e[1]:.1%}"

    def worse(ns: list[str], than: list[str]) -> str:
        """How fitting `ns` does worse held out than fitting `than` ("": it does not):
        across models, on any left-out model's TTFT or TPOT (pooled, the models it helps
        hid the one it hurts); one model's runs, on the mean of the two medians (the
        per-metric rule refused too much there: module docstring)."""
        if across is None:
            a, b = score(ns), score(than)
            return f"{both(a)} against {both(b)}" if a.mean() > b.mean() else ""
        a, b = fold_errors(problem, ns, across), fold_errors(problem, than, across)
        hurt = [f for f in range(len(across.folds)) if (a[f] > b[f]).any()]
        return "; ".join(
            f"{across_models(problem, across, f)} left out: {both(a[f])} against {both(b[f])}"
            for f in hurt
        )

    refused: dict[str, str] = {}
    if checks:
        for k in names:  # refuse a factor whose freedom makes the held-out runs worse
            why = worse(names, [n for n in names if n != k])
            if why:
                refused[k] = f"the held-out runs' error with it free, at its prior: {why}"
        kept = [n for n in names if n not in refused]
        why = worse(kept, []) if kept else ""
        if why:
            for k in kept:
                refused[k] = f"the fit does worse held out than the prior: {why}"
            kept = []
    else:  # nothing to check a fit against: the prior stays
        kept = []
        for k in names:
            refused[k] = "fewer than three points, no held-out check is possible"
    final = problem.fit(kept, everything)
    out = LoopCalibration(problem.calib(final.x), accepted=dict(final.x))
    for c in checks:
        before, after = cross_validate(problem, [], c), cross_validate(problem, kept, c)
        out.checks.append(
            {
                "split": c.split,
                "folds": len(c.folds),
                "prior_rel": float(before.mean()),
                "fitted_rel": float(after.mean()),
                "prior_ttft_rel": float(before[0]),
                "prior_tpot_rel": float(before[1]),
                "fitted_ttft_rel": float(after[0]),
                "fitted_tpot_rel": float(after[1]),
            }
        )
    if not checks:
        out.notes.append("not fitted: fewer than three points to check a fit against")
    if final.step_limit:
        out.notes.append(f"the fit stopped on its step limit ({MAX_NFEV} evaluations)")
    for k in names:
        lo, hi = factor_bounds(k, problem.base)
        v = final.x.get(k, 1.0)
        entry = {"name": k, "factor": v, "uncertainty_x": None, "status": "fitted", "note": ""}
        if k in refused:
            entry.update(status="refused", note=refused[k])
        else:
            sd = final.sd_log.get(k, math.inf)
            entry["uncertainty_x"] = math.exp(sd) if math.isfinite(sd) else None
            if min(abs(math.log(v / lo)), abs(math.log(v / hi))) < AT_BOUND:
                entry["note"] = f"at its bound ({lo:.3g}-{hi:.3g} x the prior)"
                out.notes.append(f"{k} at its bound: x{v:.3g}")
        out.factors.append(entry)
    return out
