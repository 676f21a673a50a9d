"""The hop policy of `planner adjust`: one pure decision per window of traffic.

`decide(state, obs) -> (state, actions)` is the one decision of `live.tick`, which live
(`--once`, `--every`) and replay both run, and of the tests. It does no I/O and reads no
clock: `observe.observe` builds the `Observation` (the window, its end time, every plan
point's simulated metrics on it, the drift reports, and what hopping to each point costs).

Regimes. While the traffic matches the plan (no drift), the plan's choice stands: the
policy only leaves the current point when drift fires or the point misses the SLO. Once
drift has fired in `track_min_alarms` windows of the last `track_after_drift_s` (one
alarm can be chance), the plan's assumptions are broken and the policy *tracks* the
traffic: every window counts as moved, quiet ones included (a quiet window is judged on
warm memory, as nothing waits in it), and a hop's cost is charged in proportion to the
traffic of the window it lands in (a restart at 3 am delays nobody). Tracking
also looks ahead: each point is judged on the last window and on a forecast of the next
`forecast_windows` windows (the same hours of the day before, when the log has them) and
scores the worse of the two, so the point for the morning is in force before the morning
comes and a quiet evening hour does not send the busy hour after it to a lean point. The
day before is a forecast only while it foresees: when the window's own hours a day earlier
drift from the window (bursts that do not repeat daily), the forecast is dropped. The
forecast is the second witness: such a hop needs no further confirming window, and the
current point is left for missing the SLO only when it misses on both (a peak hour that
the next hours will not repeat is not worth restarts in the middle of the day). A hop to
more warm memory waits while the next two windows are forecast quiet: landing in the
last quiet window before the traffic is early enough.

Rule, in order:
1. fewer than `min_requests` requests in the window and not tracking: hold (nothing to
   judge on);
2. a point "meets the SLO" on the window when its attainment is at least the target less
   `attainment_z` binomial standard errors (a window of 100 requests cannot tell 0.95 from
   0.93); no point meets it in `confirm_windows` consecutive windows, or in one window
   whose traffic is beyond the plan (a model's rate over `beyond_peak_factor` x the peak the
   points were fitted to, `observe.beyond_plan`: the load is the second witness):
   `reoptimize` (auto), `suggest` (with the exact command) or hold (never), at most once per
   `min_dwell_s`. A point seen missing the SLO on traffic beyond the plan lacks capacity
   that traffic needs (it comes back: busy days); it is no target from then on, and while it
   is the current point it counts as missing the SLO and is left without a confirming
   window;
3. objective of a point, in seconds: J = switch P95 + `gib_weight_s` x warm GiB (the same
   trade-off the optimizer's default scalarization makes), where the switch P95 is the
   window's shrunk towards the plan's predicted one by `prior_waits` pseudo-waits (a window
   in which few requests waited cannot show how long the waits at a point are: a lean point
   looks free on a quiet evening and then makes the night's few requests wait for wakes);
4. hop to the meeting point with the lowest J only when all of these hold (a point whose
   predicted attainment in the plan misses the target, `observe.unfit_points`, is never a
   target: a quiet window in which a point that serves only some models passes says
   nothing about the busy hours);
   - it meets the SLO outright (attainment at least the target, on the forecast too when
     tracking), when the current point meets it: the slack of rule 2 keeps the current
     point from being left for a noisy miss, not a new one chosen for a noisy pass;
   - traffic moved: drift fired against the plan's `workload_summary` or against the window
     the current point was chosen on, or the current point misses the SLO (so stationary
     traffic, whose drift is calibrated to fire in no window, never hops);
   - the current point has been in force for `min_dwell_s` and fewer than `max_hops_per_day`
     hops happened in the last 24 h;
   - the same point clears the bar below in `confirm_windows` consecutive windows (one busy
     hour is not a trend);
   - the gain J(current) - J(best) exceeds `margin` x J(current) + `min_gain_s` x
     min(1, requests / `min_requests`) (requests: of the window, or when tracking the
     forecast of the window the hop lands in: the absolute floor guards against latency
     noise and scales with the traffic; a quiet window has none);
   - the hop pays for itself: the requests forecast to arrive while it runs wait for it (a
     model all of whose instances the hop restarts or wakes serves nobody until the first
     is up; apply runs the steps one after another), and the gain must clear the same bar
     with those waits counted in the best point's switch P95 over the dwell (`min_dwell_s`,
     at least a window): a restart at 3 am delays nobody, one at 10 am may cost more in
     the tail of the waits than the better point wins. The forecast is the same hours a
     day earlier when tracking, else the last window (observe.py).
     - `hopcost.judge`: against holding, on the traffic forecast after the hop (never the
       triggering window alone), with the waits of the requests arriving during its restarts
       counted in attainment and switch P95 (hopcost.py).
     A current point that misses the SLO is left for any meeting point (no margin) that beats
     holding on both attainment and switch P95 there (hopcost.py).
Every action carries its reasons: drift verdicts and fired dimensions, every point's
metrics and objective, the gain and the threshold it had to pass, the waits a hop causes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.adjuster.hopcost import judge
from planner.adjuster.observe import switch_estimate
from planner.adjuster.policy_types import (
    DAY_S,
    AdjustConfig,
    AdjustState,
    Decision,
    HopCost,
    Observation,
)
from planner.adjuster.policy_view import Outcome, WindowView, meets_slo, objective_s, view

# ------------------------------------------------------------------------- the decision


def decide(state: AdjustState, obs: Observation) -> Outcome:
    """The policy (see the module docstring). Pure and deterministic."""
    v = view(state, obs)
    if v.cfg.decision == "lean" and obs.lean is not None:
        from planner.adjuster.policy_lean import decide_lean

        if v.cur not in obs.lean.rows:
            raise ValueError(f"no forecast for the current point {v.cur!r}")
        return decide_lean(v, _none_meets)
    if (out := _quiet(v)) is not None:
        return out
    if v.cur not in obs.metrics:
        raise ValueError(f"no metrics for the current point {v.cur!r}")
    meeting = _meeting(v)
    if not meeting:
        return _none_meets(v)
    best, cur_ok = _best(v, meeting)
    if (out := _hold_gates(v, best, cur_ok)) is not None:
        return out
    gain = _gain(v, best)
    if (out := _gain_gates(v, best, cur_ok, gain)) is not None:
        return out
    return _hop(v, best, cur_ok, gain)


def _quiet(v: WindowView) -> Outcome | None:
    """Rule 1: a quiet window (and not tracking) is no ground to judge on."""
    n = len(v.obs.window)
    cfg = v.cfg
    st = v.state
    if n >= cfg.min_requests or v.tracking:
        return None
    # a quiet hour neither confirms nor breaks a trend
    return v.hold(
        f"{n} requests in the window (< {cfg.min_requests}): nothing to judge",
        candidate=st.candidate,
        candidate_wins=st.candidate_wins,
        failing_windows=st.failing_windows,
    )


def _meeting(v: WindowView) -> list[str]:
    """The points that meet the SLO on the window and may be targets: not one the plan
    predicts to miss (however a window went there), nor one seen failing traffic beyond the
    plan while another meets it."""
    obs = v.obs
    meeting = [
        p for p in sorted(obs.metrics) if v.rows[p].meets_slo and (p == v.cur or p not in obs.unfit)
    ]
    if obs.unfit:
        v.reasons["plan_predicts_miss"] = sorted(obs.unfit)
    if v.failed:
        v.reasons["failed_beyond_plan"] = sorted(v.failed)
        meeting = [p for p in meeting if p not in v.failed] or meeting
    return meeting


def _none_meets(v: WindowView, why: str | None = None) -> Outcome:
    """Rule 2: no point meets the SLO: re-optimize or suggest once confirmed (or at once on
    traffic beyond the plan), at most once per dwell; else hold. `why`: what the lean rule
    found (on its forecast); else said of the window."""
    obs = v.obs
    cfg = v.cfg
    state = v.state
    if why is None:
        best_att = max(obs.metrics, key=lambda p: (obs.metrics[p].metrics.slo_attainment, p))
        att = obs.metrics[best_att].metrics.slo_attainment
        if v.rows[best_att].meets_slo:  # kept out by the plan's own prediction (`_meeting`)
            miss = f"{att:.1%}, but the plan predicts it misses the SLO"
        else:
            miss = f"{att:.1%} < {obs.target_attainment:.1%}"
        why = f"no point meets the SLO on the window (best: {best_att} at {miss})"
    last = state.last_reoptimize_s
    cool = last is not None and v.now - last < cfg.min_dwell_s
    if cfg.reoptimize == "never" or cool:
        return v.hold(why + ("; re-optimized recently" if cool else "; --reoptimize never"))
    fails = state.failing_windows + 1
    if obs.beyond_plan:  # the load the points were fitted to is exceeded: no noise
        why += f"; traffic beyond the plan's peak for {', '.join(obs.beyond_plan)}"
    elif fails < cfg.confirm_windows:
        return v.hold(f"{why}; {fails} of {cfg.confirm_windows} windows", failing_windows=fails)
    kind: Literal["reoptimize", "suggest"] = "reoptimize" if cfg.reoptimize == "auto" else "suggest"
    peaks = dict(state.fitted_peak_rps)  # what the next points will have been fitted to
    for m, r in obs.window_rate_rps.items():
        peaks[m] = max(peaks.get(m, 0.0), r)
    st = v.base.model_copy(update={"last_reoptimize_s": v.now, "fitted_peak_rps": peaks})
    reasons = {**v.reasons, "action": kind}
    return st, [Decision(kind, v.cur, why, reasons, v.cur, command=obs.suggest_command)]


def _best(v: WindowView, meeting: list[str]) -> tuple[str, bool]:
    """(the meeting point of the lowest objective, whether the current point meets the SLO)."""
    cur, rows = v.cur, v.rows
    cur_ok = rows[cur].meets_slo
    if v.ahead:  # two witnesses: a target must meet the SLO on both, the current miss on both
        meeting = [p for p in meeting if rows[p].forecast_meets_slo] or meeting
        cur_ok = cur_ok or bool(rows[cur].forecast_meets_slo)
    cur_ok = cur_ok and cur not in v.failed
    if cur_ok:  # leaving a point that meets the SLO: only for one that meets it outright
        meeting = sorted({cur, *(p for p in meeting if _outright(v, p))})
    return min(meeting, key=lambda p: (v.score(p), p)), cur_ok


def _hold_gates(v: WindowView, best: str, cur_ok: bool) -> Outcome | None:
    """Rule 4's gates before the gain: the best is the current point, no drift, the dwell,
    a forecast-quiet move to more memory, the hops of the day."""
    cur = v.cur
    cfg = v.cfg
    now = v.now
    if best == cur:
        return v.hold(f"{cur} is the best point on the window (objective {v.score(cur):.2f} s)")
    moved = v.fired or v.tracking or not cur_ok
    if cfg.require_drift and not moved:
        return v.hold(f"no drift and {cur} meets the SLO: stay (best would be {best})")
    if now - v.since < cfg.min_dwell_s:
        return v.hold(f"{cur} in force {now - v.since:.0f} s < dwell {cfg.min_dwell_s:.0f} s")
    fc_n = v.obs.forecast_window_requests
    if (
        v.ahead
        and len(fc_n) >= 2
        and fc_n[0] == fc_n[1] == 0
        and v.rows[best].warm_gpu_gib > v.rows[cur].warm_gpu_gib
    ):  # hopping one window before the traffic is early enough; sooner only holds memory
        return v.hold(f"{best} keeps more memory warm and the next 2 windows are forecast quiet")
    if len(v.recent) >= cfg.max_hops_per_day:
        return v.hold(f"{len(v.recent)} hops in the last 24 h (max {cfg.max_hops_per_day})")
    return None


@dataclass(frozen=True)
class _Gain:
    """What a hop to the best point wins, s, and the bar it must clear."""

    j_cur: float  # the current point's objective
    gain: float  # J(current) - J(best)
    need: float  # the bar
    j_hop: float | None  # J(best) over the dwell with the hop's waits (None: nobody waits)
    caused: float  # those waits, request-seconds


def _gain(v: WindowView, best: str) -> _Gain:
    """The gain and its bar (recorded in the reasons)."""
    cfg, fc_n = v.cfg, v.obs.forecast_window_requests
    j_cur = v.score(v.cur)
    gain = j_cur - v.score(best)
    nxt = fc_n[0] if v.ahead and fc_n else len(v.obs.window)  # the hop lands in the next window
    felt = min(1.0, nxt / cfg.min_requests)
    need = cfg.margin * j_cur + cfg.min_gain_s * felt
    j_hop, caused = _with_hop(v.obs, best, v.ahead, cfg)
    v.reasons.update(gain_s=round(gain, 4), needed_gain_s=round(need, 4))
    v.reasons.update(hop_waits_s=round(caused, 3))
    if j_hop is not None:
        v.reasons["objective_with_hop_s"] = round(j_hop, 4)
    return _Gain(j_cur, gain, need, j_hop, caused)


def _gain_gates(v: WindowView, best: str, cur_ok: bool, g: _Gain) -> Outcome | None:
    """Rule 4's last gates: the gain over its bar, with the hop's waits too, in
    `confirm_windows` consecutive windows (one when a second witness already confirms)."""
    cfg, state = v.cfg, v.state
    if cur_ok and g.gain <= g.need:
        return v.hold(f"{best} wins by {g.gain:.2f} s, not the {g.need:.2f} s a hop needs")
    if cur_ok and g.j_hop is not None and g.j_cur - g.j_hop <= g.need:
        return v.hold(
            f"{best} wins by {g.gain:.2f} s, but with the {g.caused:.0f} s of waits the hop "
            f"causes its objective over the dwell is {g.j_hop:.2f} s (current {g.j_cur:.2f} s)"
        )
    verdict = judge(v.obs, v.cur, best, cfg, rescue=not cur_ok, need_s=g.need)  # hopcost.py
    if verdict is not None:
        v.reasons["hop_verdict"] = verdict.to_json()
        if not verdict.pays:
            return v.hold(verdict.reason)
    wins = state.candidate_wins + 1 if state.candidate == best else 1
    if wins < (1 if v.ahead or v.cur in v.failed else cfg.confirm_windows):  # a witness already
        return v.hold(
            f"{best} wins by {g.gain:.2f} s > {g.need:.2f} s in {wins} of "
            f"{cfg.confirm_windows} windows",
            candidate=best,
            candidate_wins=wins,
        )
    return None


def _hop(v: WindowView, best: str, cur_ok: bool, g: _Gain) -> Outcome:
    """Every gate passed: hop to `best`."""
    cur = v.cur
    why = (
        f"{cur} missed the SLO on traffic beyond the plan; {best} meets it"
        if cur in v.failed
        else f"{cur} misses the SLO ({v.rows[cur].slo_attainment:.1%}); {best} meets it"
        if not cur_ok
        else f"{best} wins by {g.gain:.2f} s > {g.need:.2f} s"
        + (
            f", {g.j_cur - g.j_hop:.2f} s with the {g.caused:.0f} s of waits the hop causes"
            if g.j_hop is not None
            else ""
        )
    )
    return v.hop(best, why)


def _outright(v: WindowView, p: str) -> bool:
    """Whether `p`'s attainment is at least the target itself (no noise slack): on the
    window, and on the forecast too when tracking. The slack keeps the current point from
    being left for a noisy miss; a new point must not be chosen for a noisy pass."""
    target = v.obs.target_attainment
    ok = v.rows[p].slo_attainment >= target
    if v.ahead:
        ok = ok and float(v.obs.forecast[p].metrics.slo_attainment) >= target
    return ok


def _with_hop(
    obs: Observation, best: str, ahead: bool, cfg: AdjustConfig
) -> tuple[float | None, float]:
    """(J of `best` over the dwell with the waits the hop causes counted in, those waits in
    request-seconds); None when nobody waits for the hop or there is nothing to judge on.

    Over the dwell (`min_dwell_s`, at least one window) the basis repeats: its first pass
    has the hop's delays added to the waits at `best`, the others not; the switch P95 is
    taken over all of them (weighted) and shrunk as every estimate is.
    """
    delay, waits = obs.hop_delays.get(best), obs.basis_waits.get(best)
    caused = float(delay.sum()) if delay is not None else 0.0
    if not caused or waits is None or len(waits) != len(delay) or obs.basis_span_s <= 0:
        return None, caused
    scale = max(cfg.min_dwell_s, cfg.window_s) / obs.basis_span_s  # basis passes in the dwell
    n = len(waits)
    vals = np.concatenate([waits + delay, waits])  # s
    wts = np.concatenate([np.full(n, min(scale, 1.0)), np.full(n, max(scale - 1.0, 0.0))])
    est, _ = switch_estimate(vals, obs.priors.get(best), cfg.prior_waits, wts)
    e = obs.forecast[best] if ahead else obs.metrics[best]
    return objective_s(est, e.metrics.warm_gpu_gib, cfg), caused


__all__ = [
    "DAY_S",
    "AdjustConfig",
    "AdjustState",
    "Decision",
    "HopCost",
    "Observation",
    "decide",
    "meets_slo",
    "objective_s",
]
