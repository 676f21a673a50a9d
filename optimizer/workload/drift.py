"""Drift of a window of traffic against a plan's reference summary (pure).

Six kinds of dimension, each a test statistic divided by its critical value (`score`;
>= 1 fires) plus an effect-size floor so that a large window cannot fire on a tiny change:

- `mix`: model mix vs the reference's mix at the same hours of day. Statistic
  8 n JS / phi_mix, about chi-square with (models - 1) degrees of freedom under no change
  (JS in nats; phi_mix: the reference's own hour-to-hour scatter, `noise.mix`).
  Fires when it passes the chi-square quantile at p = 1e-4 (ALPHA_Z) and JS >= MIX_JS_MIN.
- `share:<model>`: one model's share vs its expected share e at those hours;
  z = (c - n e) / sqrt(phi_mix n e (1 - e)). Fires when |z| >= SHARE_Z_CRIT and the share
  ratio is outside [1/SHARE_RATIO_MAX, SHARE_RATIO_MAX] (more power than `mix` when one
  model moves).
- `new_models`: a model the reference never saw, with >= NEW_MODEL_MIN_REQUESTS requests
  and >= NEW_MODEL_MIN_SHARE of the window.
- `rate:<model>`: window count c vs the reference's expected count lam at the same hours;
  z = (c - lam) / sqrt(a lam' + b lam'^2) with lam' = max(lam, a) and [a, b] the model's
  `noise.rate` variance law (bursts of sessions and day-to-day activity make counts
  over-dispersed). Fires when |z| >= Z_CRIT, c/lam is outside
  [1/RATE_RATIO_MAX, RATE_RATIO_MAX]; it fires only upwards, when moreover c - lam >=
  RATE_MIN_BURSTS bursts (`a` each) and c passes RATE_PEAK_FACTOR x the model's busiest
  reference hour: a small team's hourly traffic swings 2-3x by itself, and less traffic
  or a busy hour the plan already saw needs no new plan.
- `switch`: per source model with >= SWITCH_ROW_MIN hand-offs, the JS of its next-model
  distribution vs the reference's; 8 sum(n_i JS_i) / phi_mix against chi-square with
  sum(k_i - 1) degrees of freedom, and a weighted mean JS >= SWITCH_JS_MIN.
- `length:<model>`: shift of the mean log input and output length, in reference standard
  deviations; fires at >= LENGTH_SHIFT_MIN with >= LENGTH_MIN_REQUESTS requests (lengths
  within a session are correlated, so only an effect size is used).

Windows with fewer than MIN_REQUESTS requests give verdict `too_few_requests` (no alarm);
with fewer than MIN_SESSIONS sessions the mix, share, switch and length dimensions are
reported but do not fire (a window of one or two sessions is one person's workflow).

Calibration (bench/workload_drift_calibration.py, 60 seeds of an 8-day stationary 10-user
synthetic trace, reference days 0-6, the 24 hourly windows of day 7): 0 false alarms in
1440 windows; a new model with 10% of requests from 12:00 fires in the first window 60/60;
planner-7b's share doubled fires in the first window 56/60 (the misses are lunch-hour
windows of 51-78 requests, too few to tell a doubling of a 17% share from chance).
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from planner.optimizer.workload.characterize import WorkloadSummary, js_divergence, summarize

MIN_REQUESTS = 30
MIN_SESSIONS = 3  # fewer sessions: the mix is one person's workflow, not the team's
ALPHA_Z = 3.719  # one-sided standard-normal quantile of ALPHA = 1e-4
Z_CRIT = 4.0
MIX_JS_MIN = 0.005  # nats
NEW_MODEL_MIN_REQUESTS = 5
NEW_MODEL_MIN_SHARE = 0.02
RATE_RATIO_MAX = 3.0
RATE_MIN_BURSTS = 4.0  # the change must exceed this many sessions' worth of requests
RATE_PEAK_FACTOR = 1.5  # and the window must pass the reference's busiest hour by this
SHARE_Z_CRIT = 4.0
SHARE_RATIO_MAX = 1.5
SWITCH_ROW_MIN = 10
SWITCH_JS_MIN = 0.01  # nats
LENGTH_SHIFT_MIN = 0.75  # reference standard deviations of log length
LENGTH_MIN_REQUESTS = 50
_TEAM_DIMENSIONS = ("mix", "share", "switch", "length")  # need MIN_SESSIONS sessions
DEFAULT_PHI_RATE = 10.0
DEFAULT_RATE_CV2 = 0.25  # when the reference is too short to measure its own scatter
DEFAULT_PHI_MIX = 2.0


class DimensionScore(BaseModel):
    """One drift dimension."""

    name: str = Field(description="mix, new_models, rate:<model>, switch, length:<model>")
    value: float = Field(description="effect size: JS nats, rate ratio, or shift in sd")
    score: float = Field(
        description="test statistic / critical value; >= 1 with the effect floor fires"
    )
    fired: bool
    detail: str = ""
    held: str = Field(default="", description="why a score >= 1 did not fire")


class DriftReport(BaseModel):
    """Verdict of one window against the reference."""

    verdict: Literal["drift", "stable", "too_few_requests"]
    requests: int = Field(description="requests in the window")
    reasons: list[str] = Field(default_factory=list, description="the dimensions that fired")
    scores: list[DimensionScore] = Field(default_factory=list)
    thresholds: dict[str, float] = Field(default_factory=dict)


def chi2_quantile(df: float, z: float = ALPHA_Z) -> float:
    """Upper chi-square quantile (Wilson-Hilferty), df degrees of freedom, normal quantile z."""
    if df <= 0:
        return math.inf
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def _thresholds() -> dict[str, float]:
    return {
        "min_requests": MIN_REQUESTS,
        "min_sessions": MIN_SESSIONS,
        "alpha_z": ALPHA_Z,
        "z_crit": Z_CRIT,
        "mix_js_min": MIX_JS_MIN,
        "new_model_min_requests": NEW_MODEL_MIN_REQUESTS,
        "new_model_min_share": NEW_MODEL_MIN_SHARE,
        "rate_ratio_max": RATE_RATIO_MAX,
        "rate_min_bursts": RATE_MIN_BURSTS,
        "rate_peak_factor": RATE_PEAK_FACTOR,
        "share_z_crit": SHARE_Z_CRIT,
        "share_ratio_max": SHARE_RATIO_MAX,
        "switch_js_min": SWITCH_JS_MIN,
        "length_shift_min": LENGTH_SHIFT_MIN,
    }


def _expected_counts(ref: WorkloadSummary, spanned: list[int]) -> dict[str, float]:
    """Requests the reference predicts per model over the window's clock hours."""
    w = np.asarray(spanned, float)
    return {
        m: float(np.dot(np.asarray(r, float), w)) for m, r in ref["rate_per_hour_of_day"].items()
    }


def drift(reference: WorkloadSummary, window: pd.DataFrame | WorkloadSummary) -> DriftReport:
    """Compare a window (trace frame or its summary) with a reference summary."""
    win = summarize(window) if isinstance(window, pd.DataFrame) else window
    n = int(win.get("requests", 0))
    if n < MIN_REQUESTS or not reference.get("requests"):
        return DriftReport(verdict="too_few_requests", requests=n, thresholds=_thresholds())
    noise = reference.get("noise") or {}
    phi_mix = float(noise.get("mix") or DEFAULT_PHI_MIX)
    phi_rates = noise.get("rate") if isinstance(noise.get("rate"), dict) else {}
    ref_models = list(reference["models"])
    win_models = list(win["models"])
    allm = ref_models + [m for m in win_models if m not in ref_models]
    c = np.array([win["mix"].get(m, 0.0) * n for m in allm])
    lam_by = _expected_counts(reference, win["hours_spanned"])
    lam = np.array([lam_by.get(m, 0.0) for m in allm])
    win_hours = max(1, sum(win["hours_spanned"]))
    # Mix vs the reference at the same hours (global mix if it never saw these hours).
    expect = lam if lam.sum() > 0 else np.array([reference["mix"].get(m, 0.0) for m in allm])
    # a new model is covered by new_models
    counts = _Counts(allm, [m in ref_models for m in allm], c, n)
    scores = [
        _mix_score(c, expect, n, phi_mix),
        _new_models_score(win, ref_models, n),
        *_share_scores(counts, expect, phi_mix),
        *_rate_scores(reference, counts, lam, phi_rates, win_hours),
        _switch_score(reference, win, phi_mix),
        *_length_scores(reference, win, ref_models, n),
    ]
    _ignore_team_dimensions(scores, int(win.get("sessions", 0)))
    for s in scores:  # a reason only where a score of 1 or more did not fire
        s.held = s.held if s.score >= 1 and not s.fired else ""
    reasons = [f"{s.name}: {s.detail}" for s in scores if s.fired]
    return DriftReport(
        verdict="drift" if reasons else "stable",
        requests=n,
        reasons=reasons,
        scores=scores,
        thresholds=_thresholds(),
    )


def _mix_score(c: np.ndarray, expect: np.ndarray, n: int, phi_mix: float) -> DimensionScore:
    """The window's model mix against the expected one: JS divergence, chi-squared test."""
    js = js_divergence(c, expect)
    k = int(((c > 0) | (expect > 0)).sum())
    crit = chi2_quantile(k - 1)
    stat = 8.0 * n * js / phi_mix
    return DimensionScore(
        name="mix",
        value=round(js, 6),
        score=round(stat / crit, 4) if math.isfinite(crit) else 0.0,
        fired=bool(stat >= crit and js >= MIX_JS_MIN),
        detail=f"JS {js:.4f} nats over {k} models, phi {phi_mix:.2f}",
        held=f"JS below the {MIX_JS_MIN:g}-nat floor",
    )


def _new_models_score(win: WorkloadSummary, ref_models: list[str], n: int) -> DimensionScore:
    """Models the reference never saw, firing when one has enough requests."""
    new = [(m, round(win["mix"][m] * n)) for m in win["models"] if m not in ref_models]
    big = [(m, x) for m, x in new if x >= NEW_MODEL_MIN_REQUESTS and x >= NEW_MODEL_MIN_SHARE * n]
    share = sum(x for _, x in big) / n
    return DimensionScore(
        name="new_models",
        value=round(share, 6),
        score=round(
            max(
                (x / max(NEW_MODEL_MIN_REQUESTS, NEW_MODEL_MIN_SHARE * n) for _, x in new),
                default=0.0,
            ),
            4,
        ),
        fired=bool(big),
        detail=", ".join(f"{m}: {x} requests" for m, x in new) or "none",
    )


class _Counts(NamedTuple):
    """The window's requests per model: the reference's models, then new ones."""

    models: list[str]
    known: list[bool]  # in the reference
    c: np.ndarray
    n: int  # all requests of the window


def _share_scores(w: _Counts, expect: np.ndarray, phi_mix: float) -> list[DimensionScore]:
    """Per known model: its share of requests against the expected share."""
    out = []
    n = w.n
    share_e = expect / expect.sum() if expect.sum() > 0 else expect
    for m, kn, cm, em in zip(w.models, w.known, w.c, share_e, strict=True):
        if not kn or em <= 0:
            continue
        sd = math.sqrt(phi_mix * n * em * (1.0 - em)) or 1.0
        z = (cm - n * em) / sd
        ratio = cm / (n * em)
        off = ratio > SHARE_RATIO_MAX or ratio < 1.0 / SHARE_RATIO_MAX
        out.append(
            DimensionScore(
                name=f"share:{m}",
                value=round(ratio, 4),
                score=round(abs(z) / SHARE_Z_CRIT, 4),
                fired=bool(abs(z) >= SHARE_Z_CRIT and off),
                detail=f"{cm / n:.1%} of requests vs {em:.1%} expected",
                held=f"share within 1/{SHARE_RATIO_MAX:g}x-{SHARE_RATIO_MAX:g}x of expected",
            )
        )
    return out


def _rate_scores(
    reference: WorkloadSummary, w: _Counts, lam: np.ndarray, phi_rates: dict, win_hours: int
) -> list[DimensionScore]:
    """Per known model: its requests against those expected at the window's hours."""
    out = []
    for m, kn, cm, lm in zip(w.models, w.known, w.c, lam, strict=True):
        if not kn:
            continue
        a, b = phi_rates.get(m) or (DEFAULT_PHI_RATE, DEFAULT_RATE_CV2)
        lf = max(lm, a)
        z = (cm - lm) / math.sqrt(a * lf + b * lf * lf)
        ratio = cm / lm if lm > 0 else math.inf if cm > 0 else 1.0
        peak = float(reference["peak"][m]["requests_per_s"]) * 3600.0 * win_hours
        # Up only, beyond a few sessions' worth, and past the busiest hour the plan was
        # sized for: less traffic, or a busy hour the plan already saw, needs no new plan.
        off = (
            ratio > RATE_RATIO_MAX
            and cm - lm >= RATE_MIN_BURSTS * a
            and cm > RATE_PEAK_FACTOR * peak
        )
        out.append(
            DimensionScore(
                name=f"rate:{m}",
                value=round(ratio, 4) if math.isfinite(ratio) else 1e9,
                score=round(abs(z) / Z_CRIT, 4),
                fired=bool(abs(z) >= Z_CRIT and off),
                detail=f"{cm:.0f} requests vs {lm:.1f} expected ({peak:.0f} at the peak hour)",
                held=_rate_held(ratio, cm - lm, a, cm, peak),
            )
        )
    return out


def _length_scores(
    reference: WorkloadSummary, win: WorkloadSummary, ref_models: list[str], n: int
) -> list[DimensionScore]:
    """Per known model: the shift of its log input and output lengths, in reference sds."""
    out = []
    for m in win["models"]:
        if m not in ref_models:
            continue
        nm = round(win["mix"][m] * n)
        r, w = reference["lengths"][m], win["lengths"][m]
        shifts = []
        for key in ("log_input_mean_sd", "log_output_mean_sd"):
            sd = max(float(r[key][1]), 0.1)  # floor: a constant length has sd 0
            shifts.append((float(w[key][0]) - float(r[key][0])) / sd)
        shift = max(shifts, key=abs)
        out.append(
            DimensionScore(
                name=f"length:{m}",
                value=round(shift, 4),
                score=round(abs(shift) / LENGTH_SHIFT_MIN, 4),
                fired=bool(abs(shift) >= LENGTH_SHIFT_MIN and nm >= LENGTH_MIN_REQUESTS),
                detail=f"input {shifts[0]:+.2f} sd, output {shifts[1]:+.2f} sd over {nm} requests",
                held=f"{nm} requests, fewer than {LENGTH_MIN_REQUESTS}",
            )
        )
    return out


def _ignore_team_dimensions(scores: list[DimensionScore], sessions: int) -> None:
    """Too few sessions say nothing about the team: their dimensions do not fire."""
    if sessions >= MIN_SESSIONS:
        return
    for s in scores:
        if s.fired and s.name.split(":")[0] in _TEAM_DIMENSIONS:
            s.fired = False
            s.held = f"{sessions} session(s) in the window, fewer than {MIN_SESSIONS}"


def _switch_score(ref: WorkloadSummary, win: WorkloadSummary, phi: float) -> DimensionScore:
    """Row-wise divergence of the next-model distributions."""
    rm, wm = ref["switch"]["models"], win["switch"]["models"]
    rc = np.asarray(ref["switch"]["counts"], float)
    wc = np.asarray(win["switch"]["counts"], float)
    allm = rm + [m for m in wm if m not in rm]
    ri = {m: i for i, m in enumerate(rm)}
    stat = 0.0
    dof = 0
    weighted = 0.0
    rows = 0
    for i, src in enumerate(wm):
        row_w = np.zeros(len(allm))
        for j, dst in enumerate(wm):
            row_w[allm.index(dst)] = wc[i, j]
        nw = row_w.sum()
        if nw < SWITCH_ROW_MIN or src not in ri:
            continue  # a new source model is the new_models dimension's business
        row_r = np.zeros(len(allm))
        row_r[: len(rm)] = rc[ri[src]]
        if row_r.sum() == 0:
            continue
        js = js_divergence(row_w, row_r)
        stat += 8.0 * nw * js / phi
        weighted += nw * js
        rows += int(nw)
        dof += int(((row_w > 0) | (row_r > 0)).sum()) - 1
    if rows == 0 or dof <= 0:
        return DimensionScore(
            name="switch", value=0.0, score=0.0, fired=False, detail="too few hand-offs"
        )
    crit = chi2_quantile(dof)
    mean_js = weighted / rows
    return DimensionScore(
        name="switch",
        value=round(mean_js, 6),
        score=round(stat / crit, 4),
        fired=bool(stat >= crit and mean_js >= SWITCH_JS_MIN),
        detail=f"mean JS {mean_js:.4f} nats over {rows} hand-offs",
        held=f"mean JS below the {SWITCH_JS_MIN:g}-nat floor",
    )


def _rate_held(ratio: float, excess: float, burst: float, count: float, peak: float) -> str:
    """Why a rate score >= 1 did not fire (the first of its effect floors it missed)."""
    if ratio < 1:
        return "less traffic: only a rise fires"
    if ratio <= RATE_RATIO_MAX:
        return f"{ratio:.2f}x expected, not above {RATE_RATIO_MAX:g}x"
    if excess < RATE_MIN_BURSTS * burst:
        return f"{excess:.0f} more requests, under {RATE_MIN_BURSTS:g} sessions' worth"
    if count <= RATE_PEAK_FACTOR * peak:
        return f"not past {RATE_PEAK_FACTOR:g}x the busiest hour the plan saw"
    return ""


def report_dict(report: DriftReport) -> dict[str, Any]:
    """JSON-able form of a report."""
    return report.model_dump(mode="json")
