"""The policy's view of one window: every point scored, and the price of each hop.

`observe(...)` builds the `Observation` that `policy.decide` reads, from the simulations of
every plan point on the window (and on the forecast: the next windows as they went a day
earlier). Pure: no files, no clock.

A hop's steps are the apply engine's own diff (`reconcile.diff`) from the current point as
it runs (gpu tier awake, lazy tiers asleep) to the target: `hop_cost` counts them and times
them with the target's perf model, one after another as apply runs them, so each (re)started
or woken instance has the time from the hop's start until it serves. When the plan records
the pair in its `hops` table (the optimizer's prediction), its counts and cost stand beside
the diff's. A model all of whose instances the hop (re)starts or wakes serves nobody until
the first of them is up: `hop_delays` gives each request that arrives meanwhile its wait,
the same for the policy's price of a hop (on the forecast) and for the replay's charge of
the hop it made (on the window after it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from planner.adjuster.policy_types import (
    DAY_S,
    AdjustConfig,
    AdjustState,
    HopCost,
    Observation,
    PointEstimate,
)
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.sim.metrics import SimResult
from planner.schemas.plan import Hop, Plan, Point
from planner.schemas.slo import Slo

if TYPE_CHECKING:
    from planner.adjuster.hopcost import After

STOP_S = 2.0  # SIGTERM to exit of a vLLM server, s: apply waits for it before the next step


@dataclass(frozen=True)
class Simulated:
    """Traffic and every plan point simulated on it: point name -> its `SimResult` (or its
    `PointMetrics`, where no per-request waits exist: its wakes stand in for them)."""

    requests: pd.DataFrame
    sims: Mapping[str, SimResult | PointMetrics]


@dataclass(frozen=True)
class ObserveSetting:
    """What stays the same from one window to the next."""

    perfs: Mapping[str, Mapping[str, Any]]  # point name -> (instance id -> InstancePerf)
    target_attainment: float  # the SLO's
    sleep_supported: bool = True  # the backend's: without it a lazy tier is a stop
    suggest_command: str = ""  # the `planner optimize ...` line a suggest prints


def hop_cost(
    src: Point,
    dst: Point,
    perfs: Mapping[str, Any],
    *,
    sleep_supported: bool = True,
    plan_hop: Hop | None = None,
) -> HopCost:
    """What turning `src` (as running) into `dst` takes; `perfs`: instance id -> InstancePerf
    of `dst`. `plan_hop`: the plan's `hops[src][dst]` entry, when it has one."""
    from planner.adjuster.reconcile import Observed, diff, spec_sha

    predicted_s = plan_hop.cost_s if plan_hop is not None else None
    if src is dst or src.instances == dst.instances:
        return HopCost(predicted_s=predicted_s)
    actual = {
        i.id: Observed(
            status="awake" if i.tier == "gpu" or not sleep_supported else "asleep",
            node=i.node,
            gpus=list(i.gpus),
            port=i.port,
            tier=i.tier,
            spec_sha=spec_sha(i),
            memory_gib=i.memory_gib.total,
        )
        for i in src.instances
        if i.tier == "gpu" or sleep_supported
    }
    steps = [(a.kind, a.instance) for a in diff(dst, actual, sleep_supported=sleep_supported)]
    tiers = {iid: o.tier for iid, o in actual.items()}
    cost = cost_of_steps(steps, tiers, perfs)
    if plan_hop is None:
        return cost
    return HopCost(
        starts=plan_hop.restarts,
        sleeps=plan_hop.sleeps,
        stops=cost.stops,
        wakes=plan_hop.wakes,
        restarted=cost.restarted,
        duration_s=cost.duration_s,
        predicted_s=predicted_s,
    )


def cost_of_steps(
    steps: list[tuple[str, str]], tiers: Mapping[str, str], perfs: Mapping[str, Any]
) -> HopCost:
    """Count and time apply steps `(kind, instance id)`, run one after another.

    `tiers`: the tier each instance ran at before (a wake from host is faster than from
    disk); `perfs`: instance id -> InstancePerf (an instance without one takes no time).
    """
    t = 0.0  # s since the hop's start
    counts = {"start": 0, "restart": 0, "wake": 0, "sleep": 0, "stop": 0}
    ready: dict[str, float] = {}
    for kind, iid in steps:
        p = perfs.get(iid)
        counts[kind] += 1
        if kind in ("start", "restart"):
            t += float(p.cold_start_s) if p is not None else 0.0
            ready[iid] = t
        elif kind == "wake":
            t += float(p.wake_s(tiers.get(iid, ""))) if p is not None else 0.0
            ready[iid] = t
        elif kind == "sleep":
            t += float(p.sleep_s) if p is not None else 0.0
        elif kind == "stop":
            t += STOP_S
    return HopCost(
        starts=counts["start"] + counts["restart"],
        sleeps=counts["sleep"],
        stops=counts["stop"],
        wakes=counts["wake"],
        restarted=ready,
        duration_s=t,
    )


def ready_by_model(point: Point, cost: HopCost) -> dict[str, float]:
    """Model -> s from the hop's start until it serves again, for the models all of whose
    instances in `point` the hop (re)starts or wakes (the others keep serving)."""
    by_model: dict[str, list[str]] = {}
    for i in point.instances:
        by_model.setdefault(i.model, []).append(i.id)
    return {
        m: min(cost.restarted[i] for i in ids)
        for m, ids in by_model.items()
        if all(i in cost.restarted for i in ids)
    }


def hop_delays(point: Point, cost: HopCost, requests: pd.DataFrame, start_s: float) -> np.ndarray:
    """Per request of `requests`: how long it waits for a hop to `point` that starts at
    `start_s` (same time base as its timestamps), s."""
    delay = np.zeros(len(requests))
    ready = ready_by_model(point, cost) if cost.restarted and len(requests) else {}
    if not ready:
        return delay
    arrival = requests["timestamp"].to_numpy(float)
    models = requests["model"].astype(str).to_numpy()
    for model, up_s in ready.items():
        t_up = start_s + up_s
        late = (models == model) & (arrival >= start_s) & (arrival < t_up)
        delay[late] = t_up - arrival[late]  # s
    return delay


def _plan_hop(plan: Plan, src: str, dst: str) -> Hop | None:
    """The plan's predicted hop `src -> dst` (its `hops` table), if it has one."""
    return plan.hops.get(src, {}).get(dst)


def switch_estimate(
    waits: np.ndarray, prior_s: float | None, k: float, weights: np.ndarray | None = None
) -> tuple[float, float]:
    """(switch P95 estimate, weighted count of requests that waited), s.

    The P95 of the positive waits (weighted: each wait counts `weights` times), shrunk
    towards `prior_s` by `k` pseudo-waits: a window in which few requests waited cannot
    show how long the waits at a point are.
    """
    w = np.ones(len(waits)) if weights is None else weights
    pos = np.isfinite(waits) & (waits > 0) & (w > 0)
    n = float(w[pos].sum())
    p95 = 0.0
    if n > 0:
        order = np.argsort(waits[pos])
        vals, cum = waits[pos][order], np.cumsum(w[pos][order])
        p95 = float(vals[min(int(np.searchsorted(cum, 0.95 * n)), len(vals) - 1)])
    if prior_s is None:
        return p95, n
    return (n * p95 + k * prior_s) / max(n + k, 1e-9), n


def _estimate(x: SimResult | PointMetrics, prior_s: float | None, k: float) -> PointEstimate:
    """A simulation's figures with its switch P95 shrunk towards the plan's prediction by
    the requests that waited (`switch_estimate`)."""
    if isinstance(x, SimResult):
        m, w = x.point_metrics(), x.switch_wait_s
        waited = int((w[np.isfinite(w)] > 0).sum())
    else:  # no per-request waits: the wakes stand in for them
        m, waited = x, int(x.switch_count)
    p95 = float(m.switch_p95_s)
    est = p95 if prior_s is None else (waited * p95 + k * prior_s) / max(waited + k, 1e-9)
    return PointEstimate(m, est)


def _priors(plan: Plan) -> dict[str, float | None]:
    """Point name -> its predicted switch P95 (None for all when the plan predicts nothing)."""
    from planner.schemas.plan import Predicted

    if all(p.predicted == Predicted() for p in plan.points):
        return {p.name: None for p in plan.points}
    return {p.name: float(p.predicted.switch_p95_s) for p in plan.points}


UNFIT_SLACK = 0.02  # predicted attainment this far below the target (or the best) is a miss


def unfit_points(plan: Plan, target: float) -> frozenset[str]:
    """Points whose predicted attainment is more than UNFIT_SLACK below the target (or below
    the best point's, when none reaches it): the plan says they miss the SLO on the traffic
    it was made for, so a quiet window in which they pass is no reason to hop there."""
    from planner.schemas.plan import Predicted

    if all(p.predicted == Predicted() for p in plan.points):
        return frozenset()
    bar = min(target, max(p.predicted.slo_attainment for p in plan.points)) - UNFIT_SLACK
    return frozenset(p.name for p in plan.points if p.predicted.slo_attainment < bar)


def observe(
    plan: Plan,
    state: AdjustState,
    end_s: float,
    window: Simulated,
    setting: ObserveSetting,
    forecast: Simulated | None = None,
    forecast_dropped: bool = False,
    after: After | None = None,
    lean: tuple[Any, Simulated, Slo] | None = None,
) -> Observation:
    """Everything `decide` needs about the window ending at `end_s`.

    `forecast`: the next `forecast_windows` windows as they went a day earlier (None: no
    history, or `forecast_dropped`: the day before did not foresee the window, `foresaw`).
    `after`: the traffic a hop is judged on (`hopcost.after`), priced here. `lean`: the
    lean decision's forecast (forecast.Forecast), every point simulated on its traffic, and
    the SLO. Drift runs only on windows with enough requests.
    """
    cfg = state.config
    if not cfg.forecast_windows:
        forecast = None
    cur = plan.point(state.point)
    costs = {
        p.name: hop_cost(
            cur,
            p,
            setting.perfs[p.name],
            sleep_supported=setting.sleep_supported,
            plan_hop=_plan_hop(plan, cur.name, p.name),
        )
        for p in plan.points
    }
    # what comes next, as forecast (else as the window): where a hop's waits are counted
    if forecast is not None:
        basis = forecast
        basis_start = end_s - DAY_S
        span = cfg.forecast_windows * cfg.window_s
    else:
        basis = window
        basis_start = end_s - cfg.window_s
        span = cfg.window_s
    delays = {
        p.name: hop_delays(p, costs[p.name], basis.requests, basis_start) for p in plan.points
    }
    prior, k = _priors(plan), cfg.prior_waits
    win = window.requests
    rates = window_rates(win, cfg.window_s)
    d_plan, d_chosen = _drifts(plan, state, win)
    return Observation(
        end_s=end_s,
        window=win,
        metrics={n: _estimate(s, prior.get(n), k) for n, s in window.sims.items()},
        hop_costs=costs,
        target_attainment=setting.target_attainment,
        drift_plan=d_plan,
        drift_chosen=d_chosen,
        suggest_command=setting.suggest_command,
        forecast={
            n: _estimate(s, prior.get(n), k)
            for n, s in (forecast.sims if forecast is not None else {}).items()
        },
        forecast_window_requests=_per_window(forecast.requests, end_s - DAY_S, cfg)
        if forecast is not None
        else (),
        basis_waits={n: s.switch_wait_s for n, s in basis.sims.items() if isinstance(s, SimResult)},
        hop_delays=delays,
        priors=prior,
        basis_span_s=span,
        forecast_dropped=forecast_dropped,
        unfit=unfit_points(plan, setting.target_attainment),
        window_rate_rps=rates,
        beyond_plan=beyond_plan(rates, plan.workload_summary, state, cfg),
        after=after.priced(plan, costs, hop_delays) if after is not None else None,
        lean=_lean(plan, lean, setting.target_attainment, cfg, costs, cur.name),
    )


def _lean(plan: Plan, lean: Any, target: float, cfg: AdjustConfig, costs: Any, cur: str) -> Any:
    """The lean decision's view (policy_lean.LeanView), None without a forecast."""
    if lean is None:
        return None
    from planner.adjuster.policy_lean import lean_view

    fc, sim, slo = lean
    return lean_view(plan, fc, sim.requests, sim.sims, slo, target, cfg, costs, hop_delays, cur)


def _drifts(plan: Plan, state: AdjustState, window: pd.DataFrame) -> tuple[Any, Any]:
    """(drift against the plan's workload summary, against the window the current point was
    chosen on); None where there is no reference or the window has too few requests."""
    from planner.optimizer.workload.drift import drift

    d_plan = d_chosen = None
    if len(window) >= state.config.min_requests:
        if plan.workload_summary.get("requests"):
            d_plan = drift(plan.workload_summary, window)  # type: ignore[arg-type]
        if state.chosen_summary:
            d_chosen = drift(state.chosen_summary, window)  # type: ignore[arg-type]
    return d_plan, d_chosen


def window_rates(window: pd.DataFrame, window_s: float) -> dict[str, float]:
    """Per model, the window's requests per second."""
    counts = window["model"].astype(str).value_counts() if len(window) else {}
    return {str(m): int(c) / window_s for m, c in dict(counts).items()}  # 1/s


def beyond_plan(
    rates: Mapping[str, float],
    summary: Mapping[str, Any],
    state: AdjustState,
    cfg: AdjustConfig,
) -> tuple[str, ...]:
    """Models whose window rate is over `beyond_peak_factor` x the peak the points were fitted
    to: the plan's peak hour (workload_summary `peak`), or the window a re-optimization was
    last issued on when that was higher. A model the plan never saw has a peak of 0. Without
    a summary (a hand-made plan) nothing is known to be beyond it."""
    if not summary.get("requests"):
        return ()
    peaks = summary.get("peak") or {}
    out = []
    for m, r in sorted(rates.items()):
        fitted = float((peaks.get(m) or {}).get("requests_per_s", 0.0))
        fitted = max(fitted, state.fitted_peak_rps.get(m, 0.0))  # req/s
        if r > cfg.beyond_peak_factor * fitted:
            out.append(m)
    return tuple(out)


def foresaw(past: pd.DataFrame, window: pd.DataFrame, cfg: AdjustConfig) -> bool:
    """Whether the window's hours a day earlier (`past`) foresaw the window: both quiet
    (under `min_requests`), or both busy without drift between them. Traffic that does not
    repeat from one day to the next (bursts) makes the day before no forecast at all."""
    from planner.optimizer.workload.characterize import summarize
    from planner.optimizer.workload.drift import drift

    busy_then, busy_now = len(past) >= cfg.min_requests, len(window) >= cfg.min_requests
    if not (busy_then or busy_now):
        return True
    if busy_then != busy_now:
        return False
    ref = summarize(past)
    ref = ref.model_dump(mode="json") if hasattr(ref, "model_dump") else dict(ref)
    return drift(ref, window).verdict != "drift"


def _per_window(df: pd.DataFrame, start_s: float, cfg: AdjustConfig) -> tuple[int, ...]:
    """Requests in each of the `forecast_windows` windows from `start_s`."""
    edges = start_s + cfg.window_s * np.arange(cfg.forecast_windows + 1)
    return tuple(int(c) for c in np.diff(np.searchsorted(df["timestamp"].to_numpy(float), edges)))


__all__ = [
    "ObserveSetting",
    "Simulated",
    "beyond_plan",
    "cost_of_steps",
    "foresaw",
    "hop_cost",
    "hop_delays",
    "observe",
    "ready_by_model",
    "switch_estimate",
    "unfit_points",
    "window_rates",
]
