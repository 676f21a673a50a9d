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

import math
from typing import Any, Literal

import numpy as np

from planner.adjuster.hopcost import judge
from planner.adjuster.observe import switch_estimate
from planner.adjuster.policy_types import (
    DAY_S,
    Action,
    AdjustConfig,
    AdjustState,
    HopCost,
    Observation,
)

# ------------------------------------------------------------------------- the decision


def objective_s(m: dict[str, Any], cfg: AdjustConfig) -> float:
    """J = switch P95 (as estimated, `switch_est_s`, when observe made one) + gib_weight_s x
    warm GiB, s."""
    switch_s = float(m.get("switch_est_s", m["switch_p95_s"]))
    return switch_s + cfg.gib_weight_s * float(m["warm_gpu_gib"])  # s + s/GiB * GiB


def meets_slo(m: dict[str, Any], target: float, cfg: AdjustConfig) -> bool:
    """Attainment at least the target less `attainment_z` binomial standard errors."""
    n = max(int(m.get("requests", 0)), 1)
    slack = cfg.attainment_z * math.sqrt(max(target * (1.0 - target), 0.0) / n)
    return float(m["slo_attainment"]) >= target - slack


def _drift_json(rep: Any) -> dict[str, Any] | None:
    if rep is None:
        return None
    return {
        "verdict": rep.verdict,
        "fired": list(rep.reasons),
        "scores": {s.name: round(float(s.score), 3) for s in rep.scores},
    }


def _fired(rep: Any) -> bool:
    return rep is not None and rep.verdict == "drift"


def decide(state: AdjustState, obs: Observation) -> tuple[AdjustState, list[Action]]:
    """The policy (see the module docstring). Pure and deterministic."""
    cfg = state.config
    now = obs.end_s
    cur = state.point
    since = state.since_s if state.since_s is not None else now
    recent = [t for t in state.hop_times_s if now - t < DAY_S]
    fired = _fired(obs.drift_plan) or _fired(obs.drift_chosen)
    alarms = [t for t in state.drift_times_s if now - t < cfg.track_after_drift_s]
    alarms += [now] if fired else []
    tracking = len(alarms) >= cfg.track_min_alarms
    base = state.model_copy(
        update={
            "drift_times_s": alarms,
            "since_s": since,
            "hop_times_s": recent,
            "decisions": state.decisions + 1,
            "candidate": None,
            "candidate_wins": 0,
            "failing_windows": 0,
        }
    )
    n = len(obs.window)
    # a point seen missing the SLO (beyond the noise slack) on traffic beyond the plan lacks
    # the capacity that traffic needs, and it comes back (busy days): it stays unfit
    failed = set(state.failed_beyond_plan)
    if obs.beyond_plan:
        target = obs.target_attainment
        failed |= {p for p, m in obs.metrics.items() if not meets_slo(m, target, cfg)}
    base = base.model_copy(update={"failed_beyond_plan": sorted(failed)})
    table = {
        name: {
            "slo_attainment": round(float(m["slo_attainment"]), 5),
            "switch_p95_s": round(float(m["switch_p95_s"]), 4),
            "ttft_p95_s": round(float(m["ttft_p95_s"]), 4),
            "warm_gpu_gib": round(float(m["warm_gpu_gib"]), 3),
            "objective_s": round(objective_s(m, cfg), 4),
            "meets_slo": meets_slo(m, obs.target_attainment, cfg),
            "hop_cost": obs.hop_costs[name].to_json() if name in obs.hop_costs else None,
        }
        for name, m in sorted(obs.metrics.items())
    }
    ahead = tracking and bool(obs.forecast) and set(obs.metrics) <= set(obs.forecast)
    if ahead:
        for name, m in obs.forecast.items():
            if name in table:
                table[name]["forecast_objective_s"] = round(objective_s(m, cfg), 4)
                table[name]["forecast_meets_slo"] = meets_slo(m, obs.target_attainment, cfg)

    def score(p: str) -> float:  # the objective a point is chosen by
        r = table[p]
        return max(r["objective_s"], r["forecast_objective_s"]) if ahead else r["objective_s"]

    reasons: dict[str, Any] = {
        "window_end_s": now,
        "requests": n,
        "drift_plan": _drift_json(obs.drift_plan),
        "drift_chosen": _drift_json(obs.drift_chosen),
        "points": table,
        "current": cur,
        "in_force_s": round(now - since, 1),
        "tracking": tracking,
        "forecast_window_requests": list(obs.forecast_window_requests) if ahead else None,
        "forecast_dropped": obs.forecast_dropped,
        "beyond_plan": list(obs.beyond_plan),
    }

    def hold(why: str) -> tuple[AdjustState, list[Action]]:
        return base, [Action("hold", cur, why, {**reasons, "action": "hold"}, from_point=cur)]

    if n < cfg.min_requests and not tracking:  # a quiet hour neither confirms nor breaks a trend
        base = base.model_copy(
            update={
                "candidate": state.candidate,
                "candidate_wins": state.candidate_wins,
                "failing_windows": state.failing_windows,
            }
        )
        return hold(f"{n} requests in the window (< {cfg.min_requests}): nothing to judge")
    if cur not in obs.metrics:
        raise ValueError(f"no metrics for the current point {cur!r}")

    # a point the plan predicts to miss the SLO is no target, however a window went there;
    # one seen failing traffic beyond the plan is one only when no other point meets the SLO
    meeting = [
        p for p in sorted(obs.metrics) if table[p]["meets_slo"] and (p == cur or p not in obs.unfit)
    ]
    if obs.unfit:
        reasons["plan_predicts_miss"] = sorted(obs.unfit)
    if failed:
        reasons["failed_beyond_plan"] = sorted(failed)
        meeting = [p for p in meeting if p not in failed] or meeting
    if not meeting:
        best_att = max(obs.metrics, key=lambda p: (obs.metrics[p]["slo_attainment"], p))
        why = (
            f"no point meets the SLO on the window (best: {best_att} at "
            f"{obs.metrics[best_att]['slo_attainment']:.1%} < {obs.target_attainment:.1%})"
        )
        cool = (
            state.last_reoptimize_s is not None and now - state.last_reoptimize_s < cfg.min_dwell_s
        )
        if cfg.reoptimize == "never" or cool:
            return hold(why + ("; re-optimized recently" if cool else "; --reoptimize never"))
        fails = state.failing_windows + 1
        if obs.beyond_plan:  # the load the points were fitted to is exceeded: no noise
            why += f"; traffic beyond the plan's peak for {', '.join(obs.beyond_plan)}"
        elif fails < cfg.confirm_windows:
            base = base.model_copy(update={"failing_windows": fails})
            return hold(f"{why}; {fails} of {cfg.confirm_windows} windows")
        kind: Literal["reoptimize", "suggest"] = (
            "reoptimize" if cfg.reoptimize == "auto" else "suggest"
        )
        peaks = dict(state.fitted_peak_rps)  # what the next points will have been fitted to
        for m, r in obs.window_rate_rps.items():
            peaks[m] = max(peaks.get(m, 0.0), r)
        st = base.model_copy(update={"last_reoptimize_s": now, "fitted_peak_rps": peaks})
        act = Action(
            kind, cur, why, {**reasons, "action": kind}, from_point=cur, command=obs.suggest_command
        )
        return st, [act]

    cur_ok = table[cur]["meets_slo"]
    if ahead:  # two witnesses: a target must meet the SLO on both, the current miss on both
        meeting = [p for p in meeting if table[p]["forecast_meets_slo"]] or meeting
        cur_ok = cur_ok or table[cur]["forecast_meets_slo"]
    cur_ok = cur_ok and cur not in failed
    if cur_ok:  # leaving a point that meets the SLO: only for one that meets it outright
        target = obs.target_attainment
        meeting = sorted({cur, *(p for p in meeting if _outright(p, table, obs, ahead, target))})
    j_cur = score(cur)
    best = min(meeting, key=lambda p: (score(p), p))
    if best == cur:
        return hold(f"{cur} is the best point on the window (objective {j_cur:.2f} s)")
    moved = fired or tracking or not cur_ok
    if cfg.require_drift and not moved:
        return hold(f"no drift and {cur} meets the SLO: stay (best would be {best})")
    if now - since < cfg.min_dwell_s:
        return hold(f"{cur} in force {now - since:.0f} s < dwell {cfg.min_dwell_s:.0f} s")
    fc_n = obs.forecast_window_requests
    if (
        ahead
        and len(fc_n) >= 2
        and fc_n[0] == fc_n[1] == 0
        and table[best]["warm_gpu_gib"] > table[cur]["warm_gpu_gib"]
    ):  # hopping one window before the traffic is early enough; sooner only holds memory
        return hold(f"{best} keeps more memory warm and the next 2 windows are forecast quiet")
    if len(recent) >= cfg.max_hops_per_day:
        return hold(f"{len(recent)} hops in the last 24 h (max {cfg.max_hops_per_day})")
    gain = j_cur - score(best)
    nxt = fc_n[0] if ahead and fc_n else n  # the hop lands in the next window
    felt = min(1.0, nxt / cfg.min_requests)
    need = cfg.margin * j_cur + cfg.min_gain_s * felt
    j_hop, caused = _with_hop(obs, best, ahead, cfg)
    reasons.update(gain_s=round(gain, 4), needed_gain_s=round(need, 4))
    reasons.update(hop_waits_s=round(caused, 3))
    if j_hop is not None:
        reasons["objective_with_hop_s"] = round(j_hop, 4)
    if cur_ok and gain <= need:
        return hold(f"{best} wins by {gain:.2f} s, not the {need:.2f} s a hop needs")
    if cur_ok and j_hop is not None and j_cur - j_hop <= need:
        return hold(
            f"{best} wins by {gain:.2f} s, but with the {caused:.0f} s of waits the hop causes "
            f"its objective over the dwell is {j_hop:.2f} s (current {j_cur:.2f} s)"
        )
    verdict = judge(obs, cur, best, cfg, rescue=not cur_ok, need_s=need)  # hopcost.py
    if verdict is not None:
        reasons["hop_verdict"] = verdict.to_json()
        if not verdict.pays:
            return hold(verdict.reason)
    wins = state.candidate_wins + 1 if state.candidate == best else 1
    if wins < (1 if ahead or cur in failed else cfg.confirm_windows):  # a witness already
        base = base.model_copy(update={"candidate": best, "candidate_wins": wins})
        return hold(
            f"{best} wins by {gain:.2f} s > {need:.2f} s in {wins} of {cfg.confirm_windows} windows"
        )
    from planner.optimizer.workload.characterize import summarize

    why = (
        f"{cur} missed the SLO on traffic beyond the plan; {best} meets it"
        if cur in failed
        else f"{cur} misses the SLO ({table[cur]['slo_attainment']:.1%}); {best} meets it"
        if not cur_ok
        else f"{best} wins by {gain:.2f} s > {need:.2f} s"
        + (
            f", {j_cur - j_hop:.2f} s with the {caused:.0f} s of waits the hop causes"
            if j_hop is not None
            else ""
        )
    )
    st = base.model_copy(
        update={
            "point": best,
            "since_s": now,
            "chosen_summary": _plain(summarize(obs.window)),
            "hop_times_s": [*recent, now],
        }
    )
    return st, [Action("hop", best, why, {**reasons, "action": "hop", "to": best}, from_point=cur)]


def _outright(p: str, table: dict[str, Any], obs: Observation, ahead: bool, target: float) -> bool:
    """Whether `p`'s attainment is at least the target itself (no noise slack): on the
    window, and on the forecast too when tracking. The slack keeps the current point from
    being left for a noisy miss; a new point must not be chosen for a noisy pass."""
    ok = table[p]["slo_attainment"] >= target
    if ahead:
        ok = ok and float(obs.forecast[p]["slo_attainment"]) >= target
    return ok


def _plain(summary: Any) -> dict[str, Any]:
    return summary.model_dump(mode="json") if hasattr(summary, "model_dump") else dict(summary)


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
    m = obs.forecast[best] if ahead else obs.metrics[best]
    return est + cfg.gib_weight_s * float(m["warm_gpu_gib"]), caused  # s + s/GiB * GiB


__all__ = [
    "DAY_S",
    "Action",
    "AdjustConfig",
    "AdjustState",
    "HopCost",
    "Observation",
    "decide",
    "meets_slo",
    "objective_s",
]
