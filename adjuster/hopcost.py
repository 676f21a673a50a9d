"""Hops that pay for themselves: a hop judged against holding, on the traffic after it.

`policy.decide` asks `judge` before it makes a hop; a hop that does not pay is a hold.

Basis: the traffic forecast after the hop (`After`, built by `after` in the tick): the next
`forecast_windows` windows as they went a day earlier, while the day before foresees the
window (`observe.foresaw`). When it does not (a burst, or a change the day before did not
have) or there is no day of history, the last `forecast_windows` windows stand for what
comes next: a one-hour burst that triggered the hop is a fraction of them, a change that has
lasted that long is all of them. Never the triggering window alone.

Cost: over the dwell (`min_dwell_s`, or `hop_horizon_s`; at least one window) the basis
repeats; on its first pass the requests of a model all of whose instances the hop (re)starts
or wakes wait for the first of them to be up (`observe.hop_delays`; a request a stand-in
answers waits for nobody). The wait adds to their switch wait and can push them past their
model's switch target: a hop costs attainment as well as switch P95. Holding costs nothing.

Rules (`judge`), each on the basis with the hop's waits counted:
1. a hop between two points that meet the SLO (a trade of switch for memory) keeps the
   attainment at least at holding's or at the target, and wins the objective J (switch P95
   estimate + `gib_weight_s` x warm GiB) over holding by the gain the policy asks;
2. a hop that leaves a point missing the SLO (the policy asks no margin of it; it is how a
   re-optimized point is first reached) must beat holding on both: strictly more requests
   in the SLO, and a switch P95 no worse than holding's (by more than the policy's noise
   bands: `margin` of it plus `min_gain_s`) unless it stays within the SLO's default switch target (a
   hop that keeps more requests in the SLO may make the waits longer, never past the SLO).
   A request the held point cannot serve at all (no instance of its model) counts as an
   unbounded wait there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from planner.adjuster.policy_types import DAY_S, AdjustConfig, HopCost, Observation
from planner.schemas.plan import Plan
from planner.schemas.slo import Slo

# (point, hop cost, requests, hop start s) -> per request, its wait for the hop, s
Waits = Callable[[Any, HopCost, pd.DataFrame, float], np.ndarray]


@dataclass(frozen=True)
class After:
    """The traffic forecast after a hop, as every point would serve it."""

    traffic: pd.DataFrame  # the basis's requests (trace schema)
    sims: Mapping[str, Any]  # point name -> SimResult on the basis
    start_s: float  # where a hop made now starts on the basis's time base, s
    span_s: float  # the basis's length, s
    kind: str  # "forecast" (the same hours a day earlier) or "recent" (the last hours)
    switch_limit_s: Mapping[str, float]  # model -> its switch target, s (inf: none)
    # point name -> per request of the basis, its wait for a hop there, s (`priced`)
    delays: Mapping[str, np.ndarray] = field(default_factory=dict)

    def priced(self, plan: Plan, costs: Mapping[str, HopCost], waits: Waits) -> After:
        """With the waits of a hop to every point of `plan` (`costs`: from the current one;
        `waits`: `observe.hop_delays`)."""
        delays = {
            p.name: waits(p, costs[p.name], self.traffic, self.start_s)
            for p in plan.points
            if p.name in costs
        }
        return replace(self, delays=delays)


def recent_s(cfg: AdjustConfig) -> float:
    """How far back the last hours reach when they stand for what comes next, s."""
    return max(cfg.forecast_windows, 1) * cfg.window_s


def after(
    slo: Slo,
    now_s: float,
    cfg: AdjustConfig,
    forecast: pd.DataFrame | None,
    forecast_sims: Mapping[str, Any] | None,
    recent: pd.DataFrame | None,
    simulate: Callable[[pd.DataFrame], Mapping[str, Any]],
) -> After | None:
    """The basis a hop decided at `now_s` is judged on: the forecast (the next windows a day
    earlier, while the day before foresees the window), else the `recent` hours (`recent_s`:
    a one-hour burst is a fraction of them, a change that has lasted them is all of them)."""
    limits = switch_limits(slo, slo.models)
    if forecast is not None and forecast_sims is not None:
        span = cfg.forecast_windows * cfg.window_s
        return After(forecast, forecast_sims, now_s - DAY_S, span, "forecast", limits)
    if recent is None:
        return None
    back = recent_s(cfg)  # the hop's waits: at the rate of the last window, it lands after it
    return After(recent, simulate(recent), now_s - cfg.window_s, back, "recent", limits)


@dataclass(frozen=True)
class Outlook:
    """A point over the dwell after the decision, held or hopped to."""

    attainment: float
    switch_p95_s: float  # estimate: shrunk towards the plan's prediction like the policy's
    objective_s: float  # switch_p95_s + gib_weight_s x warm GiB
    delayed: int  # requests that wait for the hop
    missed: int  # of those, the ones the wait takes past their switch target
    waits_s: float  # the hop's waits, request-seconds

    def to_json(self) -> dict[str, Any]:
        return {
            "slo_attainment": round(self.attainment, 5),
            "switch_p95_s": round(self.switch_p95_s, 4),
            "objective_s": round(self.objective_s, 4),
            "delayed": self.delayed,
            "missed": self.missed,
            "waits_s": round(self.waits_s, 3),
        }


@dataclass(frozen=True)
class HopVerdict:
    """Whether a hop pays for itself, and the figures it was judged on."""

    pays: bool
    reason: str
    basis: str
    hold: Outlook
    hop: Outlook

    def to_json(self) -> dict[str, Any]:
        return {
            "pays": self.pays,
            "reason": self.reason,
            "basis": self.basis,
            "hold": self.hold.to_json(),
            "hop": self.hop.to_json(),
        }


def switch_limits(slo: Slo, models: Iterable[str]) -> dict[str, float]:
    """Model -> its switch target in `slo`, s (inf: none); "": the default's."""
    out = {}
    for m in ["", *models]:
        v = slo.for_model(m).switch_p95_s
        out[m] = float(v) if v is not None else float("inf")
    return out


def _p95(vals: np.ndarray, wts: np.ndarray) -> tuple[float, float]:
    """(weighted P95 of the positive waits, an unbounded one included; their weight)."""
    pos = (vals > 0) & (wts > 0)
    n = float(wts[pos].sum())
    if n <= 0:
        return 0.0, 0.0
    order = np.argsort(vals[pos], kind="stable")
    v, cum = vals[pos][order], np.cumsum(wts[pos][order])
    return float(v[min(int(np.searchsorted(cum, 0.95 * n)), len(v) - 1)]), n


def outlook(
    sim: Any,
    delay: np.ndarray | None,
    after: After,
    cfg: AdjustConfig,
    prior_s: float | None,
) -> Outlook:
    """`sim` (a point on the basis) over the dwell, the first pass delayed by `delay` (s per
    request; None: held, nobody waits)."""
    n = len(sim.switch_wait_s)
    wait = np.asarray(sim.switch_wait_s, float)
    d = np.zeros(n) if delay is None or len(delay) != n else np.asarray(delay, float)
    if sim.substituted is not None:  # a stand-in answered: it waited for no instance
        d = np.where(sim.substituted, 0.0, d)
    d = np.where(np.isfinite(sim.ttft_s), d, 0.0)  # failed requests stay failed
    default = after.switch_limit_s.get("", np.inf)  # the SLO's default target
    limit = np.array([after.switch_limit_s.get(m, default) for m in sim.model_names] or [np.inf])
    met = np.asarray(sim.met_slo, bool)
    met_hop = met & ~((d > 0) & (wait + d > limit[sim.model])) if n else met
    horizon_s = max(
        cfg.min_dwell_s if cfg.hop_horizon_s is None else cfg.hop_horizon_s, cfg.window_s
    )
    passes = horizon_s / max(after.span_s, 1e-9)
    first, rest = min(passes, 1.0), max(passes - 1.0, 0.0)
    att = (first * met_hop.sum() + rest * met.sum()) / (passes * n) if n else 1.0
    no_inst = np.asarray(sim.instance) < 0
    for refused in (sim.queue_full, sim.over_context):
        if refused is not None:
            no_inst = no_inst & ~refused
    held = np.where(no_inst, np.inf, wait)  # nobody serves it: an unbounded wait
    vals = np.concatenate([held + d, held])
    p95, k = _p95(vals, np.concatenate([np.full(n, first), np.full(n, rest)]))
    if prior_s is not None:
        p95 = (k * p95 + cfg.prior_waits * prior_s) / max(k + cfg.prior_waits, 1e-9)
    gib = float(sim.warm_gpu_gib)
    return Outlook(
        attainment=float(att),
        switch_p95_s=p95,
        objective_s=p95 + cfg.gib_weight_s * gib,
        delayed=int((d > 0).sum()),
        missed=int((met & ~met_hop).sum()),
        waits_s=float(d.sum()),
    )


def judge(
    obs: Observation, cur: str, best: str, cfg: AdjustConfig, *, rescue: bool, need_s: float
) -> HopVerdict | None:
    """Whether the hop `cur -> best` pays for itself (module docstring). `rescue`: `cur` misses
    the SLO (rule 2); `need_s`: the objective gain the policy asks (rule 1). None: no basis
    to judge on (an observation without simulations)."""
    after = obs.after
    if after is None or cur not in after.sims or best not in after.sims:
        return None
    hold = outlook(after.sims[cur], None, after, cfg, obs.priors.get(cur))
    hop = outlook(after.sims[best], after.delays.get(best), after, cfg, obs.priors.get(best))
    on = (
        "on the forecast after the hop"
        if after.kind == "forecast"
        else f"on the last {_span(after.span_s)} (standing for the hours after the hop)"
    )
    waits = f" with the hop's waits ({hop.delayed} requests, {hop.missed} past the SLO)"
    target = obs.target_attainment

    def verdict(why: str | None) -> HopVerdict:
        return HopVerdict(why is None, why or f"{best} pays for itself {on}", after.kind, hold, hop)

    if rescue:  # beat holding on both
        if hop.attainment <= hold.attainment:
            return verdict(
                f"holding {cur} keeps {hold.attainment:.2%} of requests in the SLO {on}, "
                f"{best}{waits} {hop.attainment:.2%}: no gain"
            )
        # no worse within the policy's noise bands (`margin` share, `min_gain_s`), or within
        # the SLO's default switch target
        allowed = max(
            hold.switch_p95_s * (1.0 + cfg.margin) + cfg.min_gain_s,
            after.switch_limit_s.get("", 0.0),
        )
        if hop.switch_p95_s > allowed:
            return verdict(
                f"{best}{waits} has switch P95 {hop.switch_p95_s:.2f} s {on}, holding {cur} "
                f"{hold.switch_p95_s:.2f} s (at most {allowed:.2f} s)"
            )
        return verdict(None)
    if hop.attainment < min(hold.attainment, target):
        return verdict(
            f"{best}{waits} keeps {hop.attainment:.2%} in the SLO {on} (holding {cur}: "
            f"{hold.attainment:.2%}, target {target:.2%})"
        )
    if hold.objective_s - hop.objective_s <= need_s:
        return verdict(
            f"{best}{waits} wins {hold.objective_s - hop.objective_s:.2f} s of objective {on}, "
            f"not the {need_s:.2f} s a hop needs"
        )
    return verdict(None)


__all__ = [
    "After",
    "HopVerdict",
    "Outlook",
    "Waits",
    "after",
    "judge",
    "outlook",
    "recent_s",
    "switch_limits",
]


def _span(s: float) -> str:
    """A basis length as the reason says it: hours, or minutes under an hour."""
    return f"{s / 3600:.0f} h" if s >= 3600 else f"{s / 60:.0f} min"
