"""The lean decision (`AdjustConfig.decision = "lean"`, the default): within the SLO's
targets, the least warm GPU memory.

Every point of the plan is simulated on the forecast of the next `forecast_windows` windows
(adjuster/forecast.py: the request log's profile by hour, blended with the plan's fit by how
much log there is, times the level the last hours ran at), with the waits of the hop there
from the current point counted in (a model all of whose instances the hop restarts or wakes
serves nobody until the first is up: `observe.hop_delays`). A point *meets the targets* on
the forecast when its attainment is at least the SLO's (less `attainment_z` binomial
standard errors of the forecast's requests), no model's switch P95 is over the model's
switch target and the P95 of all waits not over the default one: the switch target is a
constraint, as TTFT and TPOT are, not a price. A hop's restart waits count in all of them;
a hop to a leaner point whose own waits push a request past its model's switch target is
not made (restarts are for hours nobody is there, wakes for any hour), a rescue may.

Quiet rungs (points with `for_traffic_share` s, optimizer/ladder.py step 5) are judged by
the plan's figures for them at s (`predicted`) and at all the fitted traffic
(`predicted_full`): one that meets the SLO's targets at all of it is a rung like any other;
else it is a candidate only while the forecast is at most its reach of the plan's fitted
traffic in its windows (`quiet_reach`: where the line between the two figures crosses a
target; `Forecast.share`, judged where the fit expects `min_requests` a window), and the one
in force is left, by sleeps and wakes, for the leanest point that meets the targets once the
forecast is over `QUIET_LEAVE` times that (traffic came back; the gap is hysteresis). A
quiet rung the plan predicts keeps no more warm than the point in force at all the traffic
(`plan_saves`) saves over the day what a forecast of a few hours where both keep everything
awake, or asleep, does not show: it wins a tie on the forecast and needs no saving there.
Points of the placement in force come first: a hop to save memory never restarts anything
(rule 1 picks among the points the hop to which starts nothing), and a rescue crosses to
another placement only where no other point of this one meets the targets.

Rule, in order:
1. the current point meets the targets on the forecast: hop to the leanest point that meets
   them there and on the window (when it has `min_requests`), only when it saves at least
   `min_saving_share` of the current point's warm GiB and `min_saving_gib_h` GiB-hours over
   the forecast windows (the price of a hop, in GiB-hours: a hop that saves less is not worth
   its work and the risk of a wrong forecast; a quiet rung of `plan_saves` saves over the
   day as the plan predicts), the same point wins `confirm_windows`
   consecutive windows, the current point has been in force `min_dwell_s`, and the last
   24 h leave room for one more hop after it (`max_hops_per_day`, one kept for a rescue);
2. the current point misses them on the forecast, or misses the SLO on the window: hop to
   the leanest point that meets them and keeps more requests in the SLO than holding, its
   hop's waits counted (no dwell, no confirmation: the forecast is the witness, and a hop
   made an hour before the morning costs no waits), within `max_hops_per_day`;
3. no point meets them on the forecast and on the window (the one in force included: the
   window that saw it miss the SLO outweighs a forecast drawn from other hours), nor the
   current point on the window: what the objective decision does when no point meets the
   SLO (`reoptimize`, `suggest` or hold; at once on traffic beyond the plan), from a quiet
   rung as from any point.
A point seen missing the SLO on traffic beyond the plan (`failed_beyond_plan`, policy.py
rule 2) lacks capacity that traffic needs, and busy days come back: while a point not seen
so meets the targets, it is no target, and when it is in force that point is a rescue, its
forecast attainment against holding not asked (bench/adjust_replay.py's real-shape week:
the day-0 points, one coder instance each, held 0.942 while the forecast said they met).
Stationary traffic never hops twice for nothing: the forecast of the hours a point was
chosen for is the same the next day, and leaving a point needs the targets met.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.adjuster.policy_types import DAY_S, AdjustConfig

SWITCH_MIN_WAITS = 5  # fewer waits of a model in the forecast: its switch P95 is not judged
QUIET_LEAVE = 2.0  # a quiet rung in force is left above this x the share it is hopped to at


@dataclass(frozen=True)
class LeanRow:
    """A point on the forecast, with the waits of the hop there from the current point."""

    attainment: float
    requests: int
    warm_gib: float
    switch_p95_s: dict[str, float]  # model -> its switch P95 (models with enough waits)
    over_switch: tuple[str, ...]  # models whose switch P95 is over their target
    delayed: int  # requests that wait for the hop
    meets: bool
    hop_breach: bool = False  # the hop itself makes a request wait past its switch target

    def to_json(self) -> dict[str, Any]:
        return {
            "slo_attainment": round(self.attainment, 5),
            "requests": self.requests,
            "warm_gpu_gib": round(self.warm_gib, 3),
            "delayed": self.delayed,
            "switch_p95_s": {m: round(v, 3) for m, v in sorted(self.switch_p95_s.items())},
            "over_switch_target": list(self.over_switch),
            "meets_targets": self.meets,
            "hop_breaches_switch_target": self.hop_breach,
        }


@dataclass(frozen=True)
class LeanView:
    """What the lean decision reads: the forecast and every point on it."""

    forecast: Any  # forecast.Forecast
    rows: dict[str, LeanRow]
    # quiet rung -> the highest forecast share it is predicted to meet the targets at
    # (`quiet_reach`; inf: at any, the forecast alone judges it)
    quiet: dict[str, float] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)  # point -> (re)starts of the hop there
    # quiet rungs the plan predicts keep no more warm than the point in force, and hold the
    # SLO as well (to `max_attainment_loss`), at all the fitted traffic (`plan_saves`)
    plan_savers: frozenset[str] = frozenset()


def lean_row(
    sim: Any,
    delay: np.ndarray | None,
    slo: Any,
    target: float,
    cfg: AdjustConfig,
    floor_gib: float,
) -> LeanRow:
    """A point's row (`sim`: its SimResult on the forecast; `delay`: each request's wait for
    the hop there, None: the current point; `floor_gib`: its warm GiB with nothing to do)."""
    from planner.adjuster.hopcost import switch_limits
    from planner.optimizer.sim.metrics import met_slo

    limits = switch_limits(slo, sim.model_names)
    n = len(sim.ttft_s)
    if not n:
        return LeanRow(1.0, 0, floor_gib, {}, (), 0, True, False)
    d = np.zeros(n) if delay is None or len(delay) != n else np.asarray(delay, float)
    if sim.substituted is not None:  # a stand-in answered: it waited for no instance
        d = np.where(sim.substituted, 0.0, d)
    d = np.where(np.isfinite(sim.ttft_s), d, 0.0)  # failed requests stay failed
    wait = np.asarray(sim.switch_wait_s, float) + d
    ttft = np.asarray(sim.ttft_s, float) + d
    met = (
        met_slo(sim.model, sim.model_names, ttft, sim.tpot_s, wait, slo)
        if d.any()
        else np.asarray(sim.met_slo, bool)
    )
    att = float(met.mean())
    p95s, over = {}, []
    for k, m in enumerate(sim.model_names):
        w = wait[(sim.model == k) & (wait > 0)]
        if len(w) < SWITCH_MIN_WAITS:
            continue
        p95s[m] = float(np.percentile(w, 95))
        if p95s[m] > limits.get(m, limits.get("", math.inf)):
            over.append(m)
    breach = False  # the hop itself pushes a request past its model's switch target
    if d.any():
        lim = np.array([limits.get(m, limits.get("", math.inf)) for m in sim.model_names])
        breach = bool(((d > 0) & (wait > lim[np.asarray(sim.model, int)])).any())
    every = wait[wait > 0]  # all models' waits against the SLO's default switch target
    if len(every) >= SWITCH_MIN_WAITS:
        p95s[""] = float(np.percentile(every, 95))
        if p95s[""] > limits.get("", math.inf):
            over.append("")
    slack = cfg.attainment_z * math.sqrt(max(target * (1.0 - target), 0.0) / n)
    meets = att >= target - slack and not over
    delayed = int((d > 0).sum())
    return LeanRow(att, n, float(sim.warm_gpu_gib), p95s, tuple(over), delayed, meets, breach)


def floor_gib(point: Any) -> float:
    """Warm GiB of `point` with nothing to do: gpu-tier instances awake, the others asleep."""
    total = 0.0
    for i in point.instances:
        m = i.memory_gib
        total += (m.total if i.tier == "gpu" else float(getattr(m, "asleep", 0.0) or 0.0)) * len(
            i.gpus
        )
    return total


def lean_view(
    plan: Any,
    fc: Any,
    traffic: Any,
    sims: Any,
    slo: Any,
    target: float,
    cfg: AdjustConfig,
    costs: Any,
    hop_delays: Callable[..., Any],
    cur: str | None = None,
) -> LeanView:
    """Every point of `plan` on the forecast `fc` (`traffic`: its requests; `sims`: point
    name -> SimResult on them), with the waits of the hop there (`costs`: from the current
    point, `observe.hop_cost`; `hop_delays`: observe.hop_delays, passed in by observe, which
    imports this module) counted in; `cur`: the point in force)."""
    rows, restarts = {}, {}
    for p in plan.points:
        cost = costs.get(p.name)
        delay = hop_delays(p, cost, traffic, fc.start_s) if cost is not None else None
        rows[p.name] = lean_row(sims[p.name], delay, slo, target, cfg, floor_gib(p))
        restarts[p.name] = cost.starts if cost is not None else 0
    quiet = {p.name: quiet_reach(p, slo, cfg) for p in plan.points if p.for_traffic_share}
    savers = frozenset(plan_saves(plan, cur, costs, cfg))
    return LeanView(fc, rows, quiet, restarts, savers)


def plan_saves(plan: Any, cur_name: str | None, costs: Any, cfg: AdjustConfig) -> list[str]:
    """The quiet rungs a hop to which restarts nothing and that the plan predicts, on its
    chosen days at all their traffic (`predicted_full`), keep no more warm GiB than the point
    in force (its `predicted`, the same days) at no more than `max_attainment_loss` less
    attainment. At their share of the traffic they keep less than every rung by construction
    (optimizer/ladder.py step 5): the saving is the day's, which a forecast of a few hours
    where both keep everything awake or asleep does not show."""
    cur = next((p for p in plan.points if p.name == cur_name), None)
    if cur is None or cur.for_traffic_share:
        return []
    out = []
    for p in plan.points:
        full = p.predicted_full
        cost = costs.get(p.name)
        if full is None or cost is None or cost.starts:
            continue
        if (
            full.warm_gpu_gib <= cur.predicted.warm_gpu_gib
            and full.slo_attainment >= cur.predicted.slo_attainment - cfg.max_attainment_loss
        ):
            out.append(p.name)
    return out


def quiet_reach(point: Any, slo: Any, cfg: AdjustConfig) -> float:
    """The highest share of the plan's fitted traffic at which the quiet rung `point` is
    predicted to meet the SLO's targets (attainment and the default switch target): inf
    where it meets them at all the traffic (`predicted_full`: a rung like any other, judged
    on the forecast alone); else read on the line between its figures at its share
    (`predicted`, which meet them) and at all the traffic. A plan without `predicted_full`
    (written before) gives its share x `quiet_headroom`."""
    s = float(point.for_traffic_share)
    full = point.predicted_full
    if full is None:
        return s * cfg.quiet_headroom
    at_s = point.predicted
    limit = slo.default.switch_p95_s or math.inf
    # the share at which each figure reaches its target, on the line from s to 1
    reach = 1.0
    for low, high, bar, up in (
        (at_s.slo_attainment, full.slo_attainment, slo.attainment, False),
        (at_s.switch_p95_s, full.switch_p95_s, limit, True),
    ):
        over = high > bar if up else high < bar
        if not over:
            continue
        ok_at_s = low <= bar if up else low >= bar
        if not ok_at_s:
            return s
        reach = min(reach, s + (1.0 - s) * (bar - low) / (high - low))
    return math.inf if reach >= 1.0 else reach


def decide_lean(v: Any, none_meets: Callable[[Any, str], Any]) -> Any:
    """The lean rule (module docstring) on `v` (policy_view.WindowView)."""
    lean: LeanView = v.obs.lean
    cfg = v.cfg
    cur = v.cur
    rows = lean.rows
    v.reasons["lean"] = {
        "forecast": lean.forecast.to_json(),
        "points": {p: r.to_json() for p, r in sorted(rows.items())},
    }
    window_ok = (
        {p: v.rows[p].meets_slo for p in rows} if len(v.obs.window) >= cfg.min_requests else None
    )
    share = lean.forecast.share(cfg.min_requests * max(cfg.forecast_windows, 1))
    meeting = _meeting(v, lean, window_ok, share)
    # a point seen missing the SLO on traffic beyond the plan lacks the capacity that traffic
    # needs (policy.py rule 2): one not seen so is preferred, and the point in force, if it
    # was, is left for it (a forecast drawn from calmer hours is no witness for it)
    fresh = [p for p in meeting if p not in v.failed]
    escape = cur in v.failed and bool(fresh)
    meeting = fresh or meeting
    q = lean.quiet.get(cur)
    leave = q is not None and share is not None and share > q * QUIET_LEAVE
    if leave and meeting:  # where nothing meets the targets, rule 3 as for any point
        return _leave_quiet(v, lean, [p for p in meeting if p != cur], share)
    if not meeting:
        if window_ok is None or not window_ok.get(cur, False):
            return none_meets(v, _why_none(lean, window_ok))
        return v.hold(f"no point meets the targets on the forecast; {cur} meets them on the window")
    cur_row = rows[cur]
    cur_ok = cur_row.meets and (window_ok is None or window_ok[cur]) and not escape
    if cur_ok:  # a trade of memory: not of the attainment the current point keeps, and
        # not by a hop whose own waits pass a switch target (restarts are for quiet hours)
        floor = cur_row.attainment - cfg.max_attainment_loss
        meeting = [
            p
            for p in meeting
            if p == cur or (rows[p].attainment >= floor and not rows[p].hop_breach)
        ]
    # the placement in force first: a saving never restarts anything, and a rescue crosses
    # to another placement only where none of this one's points meets the targets
    same = [p for p in meeting if lean.restarts.get(p, 0) == 0]
    if cur_ok or any(p != cur for p in same):
        meeting = same
    # ties on the forecast (hours where both keep everything awake, or asleep) go to a
    # point the plan predicts saves over the day
    best = min(
        meeting,
        key=lambda p: (round(rows[p].warm_gib, 1), rows[p].delayed, p not in lean.plan_savers, p),
    )
    if best == cur:
        return v.hold(f"{cur} is the leanest point that meets the targets on the forecast")
    if not cur_ok:  # rule 2: a rescue
        return _rescue(v, cur_row, best, rows[best])
    return _saving(v, cur_row, best, rows[best])


def _meeting(
    v: Any, lean: LeanView, window_ok: dict[str, bool] | None, share: float | None
) -> list[str]:
    """The points that meet the targets on the forecast (and on the window, where it holds
    enough requests), the one in force a candidate unless the window saw it miss the SLO (a
    forecast drawn from other hours is no witness against the hour itself: rule 2 or 3)."""
    cur = v.cur
    rows = lean.rows
    # a quiet rung is hopped to only while the forecast is within its reach (the share of
    # the fit it is predicted to meet the targets at), one that meets them at all the traffic
    # like any rung; the one in force is left when the forecast is over QUIET_LEAVE times
    # its reach (hysteresis: a forecast of a few hours is noisy)
    shut = {
        p
        for p, reach in lean.quiet.items()
        if math.isfinite(reach) and (share is None or share > reach)
    }
    return [
        p
        for p in sorted(rows)
        if rows[p].meets and (window_ok is None or window_ok[p]) and (p == cur or p not in shut)
    ]


def _why_none(lean: LeanView, window_ok: dict[str, bool] | None) -> str:
    """Why no point meets the targets, said of the one that comes closest: what it misses
    on the forecast (`_miss`: its attainment and the models whose switch P95 is over its
    target), else the SLO on the window, else the reach of a quiet rung (`_meeting`)."""
    rows = lean.rows
    best = max(rows, key=lambda p: (rows[p].meets, rows[p].attainment, p))
    row = rows[best]
    if not row.meets:
        return f"no point meets the targets on the forecast (best: {best}, {_miss(row)})"
    if window_ok is not None and not window_ok[best]:
        return (
            "no point meets the targets on the forecast and the SLO on the window "
            f"({best} misses the SLO on the window)"
        )
    return f"no point meets the targets ({best} does on the forecast: a quiet rung out of reach)"


def _rescue(v: Any, cur_row: LeanRow, best: str, best_row: LeanRow) -> Any:
    """Rule 2: the point in force misses the targets; a hop to `best`, which meets them,
    unless the hops of the day are spent or the hop's own waits eat the gain."""
    cur, cfg = v.cur, v.cfg
    used = len(v.recent)
    if used >= cfg.max_hops_per_day:
        return v.hold(f"{cur} misses the targets on the forecast, but {used} hops in 24 h")
    on = "on the forecast" if not cur_row.meets else "on the window"
    # the hop's own waits eat the gain (leaving a point failed beyond the plan for one that
    # was not: the forecast's attainment of the point in force is no witness)
    escape = cur in v.failed and best not in v.failed
    if not escape and best_row.attainment <= cur_row.attainment:
        return v.hold(
            f"{cur} misses the targets {on}, but {best} with the hop's waits keeps "
            f"{best_row.attainment:.1%} in the SLO against {cur_row.attainment:.1%}"
        )
    if escape:
        miss = "missed the SLO on traffic beyond the plan"
    elif cur_row.meets:  # the window's figure, not the forecast's
        miss = f"misses the SLO on the window (attainment {v.rows[cur].slo_attainment:.1%})"
    else:
        miss = f"misses the targets on the forecast ({_miss(cur_row)})"
    return v.hop(best, f"{cur} {miss}; {best} meets them")


def _saving(v: Any, cur_row: LeanRow, best: str, best_row: LeanRow) -> Any:
    """Rule 3: `best` meets the targets with less memory than the point in force; a hop once
    the saving is big enough (on the forecast, or over the day as the plan predicts:
    `plan_saves`), the dwell is over, a hop is left for a rescue and it has won
    `confirm_windows` windows in a row."""
    cur, cfg = v.cur, v.cfg
    used = len(v.recent)
    saved = cur_row.warm_gib - best_row.warm_gib
    saved_gib_h = saved * cfg.forecast_windows * cfg.window_s / 3600.0
    small = saved < cfg.min_saving_share * cur_row.warm_gib or saved_gib_h < cfg.min_saving_gib_h
    if small and best not in v.obs.lean.plan_savers:
        # still the leanest that meets the targets: a window that saves less with it (an hour
        # the point in force sleeps too) keeps, not resets, the candidate's count
        keep = v.state.candidate == best
        return v.hold(
            f"{best} saves {saved:.1f} GiB ({saved_gib_h:.0f} GiB-h over the forecast), not "
            f"the {cfg.min_saving_share:.0%} and {cfg.min_saving_gib_h:.0f} GiB-h a hop needs",
            candidate=best if keep else None,
            candidate_wins=v.state.candidate_wins if keep else 0,
        )
    if v.now - v.since < cfg.min_dwell_s:
        return v.hold(f"{cur} in force {v.now - v.since:.0f} s < dwell {cfg.min_dwell_s:.0f} s")
    if used >= cfg.max_hops_per_day - 1:  # one kept for a rescue
        return v.hold(f"{used} hops in the last 24 h: the last of {cfg.max_hops_per_day} is kept")
    wins = v.state.candidate_wins + 1 if v.state.candidate == best else 1
    if wins < cfg.confirm_windows:
        return v.hold(
            f"{best} meets the targets at {saved:.1f} GiB less in {wins} of "
            f"{cfg.confirm_windows} windows",
            candidate=best,
            candidate_wins=wins,
        )
    if small:
        return v.hop(
            best,
            f"{best} meets the targets on the forecast, and the plan predicts it keeps no more "
            "warm at all the traffic and less at its share",
        )
    return v.hop(best, f"{best} meets the targets on the forecast with {saved:.1f} GiB less")


def _leave_quiet(v: Any, lean: LeanView, meeting: list[str], share: float) -> Any:
    """The quiet rung in force is left: the forecast is over QUIET_LEAVE x its reach; to the
    leanest point that meets the targets, of its placement where one does."""
    cur, cfg = v.cur, v.cfg
    why = (
        f"traffic forecast at {share:.0%} of the fit, over {QUIET_LEAVE:g} x the "
        f"{lean.quiet[cur]:.0%} {cur} is predicted to meet the targets at"
    )
    same = [p for p in meeting if lean.restarts.get(p, 0) == 0] or meeting
    if not same:
        return v.hold(f"{why}, but no other point meets the targets on the forecast")
    if len(v.recent) >= cfg.max_hops_per_day:
        return v.hold(f"{why}, but {len(v.recent)} hops in 24 h")
    best = min(same, key=lambda p: (lean.rows[p].warm_gib, lean.rows[p].delayed, p))
    return v.hop(best, f"{why}; {best} meets the targets")


def _miss(r: LeanRow) -> str:
    parts = [f"attainment {r.attainment:.1%}"]
    parts += [f"{m or 'all'} switch P95 {r.switch_p95_s[m]:.1f} s" for m in r.over_switch]
    return ", ".join(parts)


__all__ = ["DAY_S", "LeanRow", "LeanView", "decide_lean", "floor_gib", "lean_row", "lean_view"]
