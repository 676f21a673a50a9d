"""Replay a trace through the adjuster, window by window: the live tick on a trace.

`replay(plan, trace, slo, perfs, config)` cuts the trace into windows of `config.window_s`
aligned on multiples of it (trace seconds count from 00:00 of day 0, so 1 h windows are
clock hours, as live), and at the end of each window runs `live.tick`, the code the live
adjuster runs, with the trace as its request log (`TraceSource`), a `SimBackend` (a hop is
the same `apply_point`, nothing starts) and a state store in a temporary folder. Per window:
1. the tick simulates every point of the plan on the window's requests (the `simulate` the
   optimizer scores with) and on the forecast, observes, decides, and makes the hop;
2. the point in force during the window takes that window's simulated requests as its own
   (adjusted series); every plan point's requests also go to its static series (that point
   held all along);
3. a hop decided at the end of a window is in force from the next window on.

Model of the carry-over at window edges (documented approximations, the same for the
adjusted and the static series so that they compare like with like): each window is
simulated from a fresh start of its point (gpu-tier instances awake, host/disk ones awake
as long as they displace nobody, no prefix cache), and requests still running at a window's
end finish in that window's simulation.

Cost of a hop: the steps `apply_point` took (`observe.cost_of_steps`, timed by the target's
perf model, one after another). A model all of whose instances the hop (re)starts or wakes
is unavailable until the first of them is up, counted from the window's start: its requests
arriving before then wait that much longer (`observe.hop_delays`, added to TTFT and to the
switch wait; the SLO check is redone), and every start and wake counts as a switch. Requests
of models that keep an instance are not delayed (make-before-break).

Re-optimization: with `config.reoptimize == "auto"` and a `reoptimizer`, a `reoptimize`
decision runs it on the last `reoptimize_lookback_s` of traffic and its points join the plan
(named `<name>@<hour>h`, scored from the next window on; `static` keeps only the plan's own
points). `reoptimizations` lists every one with its reason, like `hops`.

Stand-ins: the tick's `simulate` routes by each point's `substitutes` as the optimizer's
scorer does, so a point is scored here with substitution on, exactly as it was chosen; a
request a stand-in answered waits for no hop of its own model.

Aggregation: per-request arrays of all windows are concatenated and the percentiles
recomputed (switch P95 over requests that waited, as `SimResult`; substituted share and
quality cost over all requests); warm GiB is the time-average over windows (each window's
simulated average weighted by the window length); `gpus_used` is the most any window used;
`refused` sums the unserved requests of every window by reason.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from planner.adjuster.apply import apply_point
from planner.adjuster.backends.sim import SimBackend
from planner.adjuster.live import TickConfig, TickResult, TraceSource, tick
from planner.adjuster.observe import hop_delays
from planner.adjuster.policy_types import DAY_S, AdjustConfig, AdjustState, HopCost
from planner.adjuster.state import StateStore
from planner.optimizer.sim.metrics import met_slo, percentiles
from planner.schemas.plan import Plan, Point
from planner.schemas.slo import Slo

Progress = Callable[[int, int], None]
# window trace -> new points and their perfs (point name -> instance id -> InstancePerf)
Reoptimizer = Callable[[pd.DataFrame], tuple[list[Point], dict[str, dict[str, Any]]]]


@dataclass
class _Series:
    """Per-request figures of one series (adjusted or one static point) over all windows."""

    ttft: list[np.ndarray] = field(default_factory=list)
    tpot: list[np.ndarray] = field(default_factory=list)
    wait: list[np.ndarray] = field(default_factory=list)
    met: list[np.ndarray] = field(default_factory=list)
    penalty: list[np.ndarray] = field(default_factory=list)  # quality penalty, 0: not a stand-in
    subst: list[np.ndarray] = field(default_factory=list)  # a stand-in answered
    wakes: int = 0
    gib_s: float = 0.0  # warm GiB x seconds
    span_s: float = 0.0
    gpus: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # unserved requests by reason

    def add(
        self, sim: Any, window_s: float, ttft=None, wait=None, met=None, extra_wakes: int = 0
    ) -> None:
        self.ttft.append(sim.ttft_s if ttft is None else ttft)
        self.tpot.append(sim.tpot_s)
        self.wait.append(sim.switch_wait_s if wait is None else wait)
        self.met.append(sim.met_slo if met is None else met)
        n = len(sim.ttft_s)
        self.subst.append(sim.substituted if sim.substituted is not None else np.zeros(n, bool))
        self.penalty.append(
            sim.quality_penalty if sim.quality_penalty is not None else np.zeros(n, float)
        )
        self.wakes += sim.wakes + extra_wakes
        self.gib_s += sim.warm_gpu_gib * window_s  # GiB x s
        self.span_s += window_s
        self.gpus = max(self.gpus, sim.gpus_used)
        self.refused.update(sim.refused())

    def metrics(self) -> dict[str, Any]:
        """The keys of `planner evaluate --json` (per point), over the whole trace."""
        cat = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt)  # noqa: E731
        ttft, tpot, wait = cat(self.ttft, float), cat(self.tpot, float), cat(self.wait, float)
        met = cat(self.met, bool)
        subst, penalty = cat(self.subst, bool), cat(self.penalty, float)
        return {
            "slo_attainment": float(met.mean()) if len(met) else 1.0,
            "ttft_p95_s": percentiles(ttft)["p95"],
            "tpot_p95_s": percentiles(tpot)["p95"],
            "switch_p95_s": percentiles(wait[wait > 0])["p95"],
            "switch_count": int(self.wakes),
            "warm_gpu_gib": self.gib_s / self.span_s if self.span_s > 0 else 0.0,
            "gpus_used": int(self.gpus),
            "requests": len(met),
            "refused": dict(self.refused),
            "substituted_share": float(subst.mean()) if len(subst) else 0.0,
            "quality_cost": float(penalty.sum() / len(penalty)) if len(penalty) else 0.0,
        }


def _charge_hop(
    sim: Any, point: Point, cost: HopCost, start_s: float, window: pd.DataFrame, slo: Slo
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TTFT, switch wait and SLO mask of a window's requests after a hop at `start_s`."""
    delay = hop_delays(point, cost, window, start_s)
    if sim.substituted is not None:  # a stand-in answered: it waited for no instance of its own
        delay = np.where(sim.substituted, 0.0, delay)
    if not delay.any():
        return sim.ttft_s, sim.switch_wait_s, sim.met_slo
    delay = np.where(np.isfinite(sim.ttft_s), delay, 0.0)  # failed requests stay failed
    ttft, wait = sim.ttft_s + delay, sim.switch_wait_s + delay
    return ttft, wait, met_slo(sim.model, sim.model_names, ttft, sim.tpot_s, wait, slo)


def replay(
    plan: Plan,
    trace: pd.DataFrame,
    slo: Slo,
    perfs: dict[str, dict[str, Any]],
    config: AdjustConfig | None = None,
    *,
    start_point: str | None = None,
    sleep_supported: bool = True,
    progress: Progress | None = None,
    reoptimizer: Reoptimizer | None = None,
    warmup_s: float = 0.0,
) -> dict[str, Any]:
    """Walk `trace` through `live.tick`; `{"adjusted", "static", "hops", "reoptimizations",
    "actions", "decisions" (one per window), ...}`.

    `perfs`: point name -> (instance id -> InstancePerf), e.g. from `perfs_for_point`.
    `reoptimizer` (with `config.reoptimize == "auto"`): called on the recent traffic when the
    policy asks to re-optimize. `warmup_s`: the windows of the first `warmup_s` of the trace
    are decided on (history for the forecast, drift alarms, hops) but left out of every
    series, like the log a live adjuster already has. Deterministic: same inputs, same output.
    """
    cfg = config or AdjustConfig()
    perfs = dict(perfs)
    w = cfg.window_s
    names = [p.name for p in plan.points]
    model_names = list(dict.fromkeys([i.model for p in plan.points for i in p.instances]))
    model_names += sorted(set(trace["model"].astype(str)) - set(model_names))
    ts = trace["timestamp"].to_numpy(float)
    # from 00:00 of the first day: clock-hour windows, and the forecast has the day's history
    unit = DAY_S if DAY_S % w == 0 else w
    first = float(np.floor(ts.min() / unit) * unit) if len(ts) else 0.0
    n_win = int(np.floor((ts.max() - first) / w)) + 1 if len(ts) else 0
    start = start_point or plan.selected

    static = {n: _Series() for n in names}
    adjusted = _Series()
    log = _Log()
    pending: HopCost | None = None  # the hop made at the end of the previous window
    source, backend = TraceSource(trace), SimBackend(sleep_supported)
    tcfg = TickConfig(
        policy=cfg, slo=slo, perfs=perfs, plan_sha="replay", model_names=model_names,
        start=AdjustState(point=start, since_s=first, config=cfg),
        reoptimize=_grower(reoptimizer, perfs) if reoptimizer is not None else None,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="planner-replay-") as tmp, StateStore(tmp) as store:
        apply_point(plan, start, backend=backend, state=store, model_path_resolver=lambda i: "")
        state = tcfg.start
        for k in range(n_win):
            start_s, end_s = first + k * w, first + (k + 1) * w
            res = tick(end_s, source, backend, store, plan, tcfg)
            win, cur = res.window, plan.point(res.state_before.point)
            if start_s >= first + warmup_s:
                for n in names:  # the plan's own points
                    static[n].add(res.sims[n], w)
                sim = res.sims[cur.name]
                if pending is not None:
                    t, q, m = _charge_hop(sim, cur, pending, start_s, win, slo)
                    extra = pending.starts + pending.wakes
                    adjusted.add(sim, w, ttft=t, wait=q, met=m, extra_wakes=extra)
                else:
                    adjusted.add(sim, w)
            pending = res.hop
            log.record(res, end_s)
            plan, state = res.plan, res.state
            if progress is not None:
                progress(k + 1, n_win)
    return {
        "adjusted": adjusted.metrics(),
        "static": {n: s.metrics() for n, s in static.items()},
        **log.to_json(),
        "windows": n_win,
        "window_s": w,
        "start_point": start,
        "final_point": state.point,
        **log.hop_rates(n_win * w),
        "config": cfg.model_dump(mode="json"),
    }


class _Log:
    """What a replay did, window by window: hops, other actions, re-optimizations, decisions."""

    def __init__(self) -> None:
        self.hops: list[dict[str, Any]] = []
        self.reopts: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.decisions: list[dict[str, Any]] = []  # one per window

    def record(self, res: TickResult, end_s: float) -> None:
        """The decision of the window ending at `end_s` (and its hop or other action)."""
        act, win = res.action, res.window
        self.decisions.append({
            "at_s": end_s, "kind": act.kind, "from": act.from_point, "point": act.point,
            "requests": len(win), "forecast_window_requests": list(res.forecast_requests),
        })  # fmt: skip
        if act.kind == "hop":
            assert res.hop is not None
            self.hops.append({
                "at_s": end_s, "from": act.from_point, "to": act.point, "reason": act.reason,
                "restarts": res.hop.starts, "wakes": res.hop.wakes, "sleeps": res.hop.sleeps,
                "stops": res.hop.stops, "tiers_only": res.hop.tiers_only,
            })  # fmt: skip
        elif act.kind != "hold":
            entry = {"at_s": end_s, "kind": act.kind, "point": act.point, "reason": act.reason}
            self.actions.append({**entry, **res.report})
            if act.kind == "reoptimize":
                self.reopts.append({"at_s": end_s, "from": act.from_point, "reason": act.reason,
                                    "window_requests": len(win), **res.report})  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "hops": self.hops,
            "reoptimizations": self.reopts,
            "actions": self.actions,
            "decisions": self.decisions,
        }

    def hop_rates(self, span_s: float) -> dict[str, Any]:
        """Hops per day over the replayed span, the most on one day, those of tiers only."""
        per_day: dict[int, int] = {}
        for h in self.hops:
            d = int(h["at_s"] // DAY_S)
            per_day[d] = per_day.get(d, 0) + 1
        return {
            "hops_per_day": round(len(self.hops) / max(span_s / DAY_S, 1e-9), 3),
            "max_hops_per_day": max(per_day.values(), default=0),
            "tiers_only_hops": sum(h["tiers_only"] for h in self.hops),
        }


def _grower(reoptimizer: Reoptimizer, perfs: dict[str, dict[str, Any]]):
    """`TickConfig.reoptimize` of a replay: the new points join the plan (`<name>@<hour>h`)."""

    def grow(recent: pd.DataFrame, now_s: float, plan: Plan) -> tuple[Plan, dict[str, Any]]:
        points, new_perfs = reoptimizer(recent)
        tag = f"@{int(now_s // 3600)}h"
        added = []
        for p in points:
            name = p.name + tag
            perfs[name] = new_perfs[p.name]
            added.append(p.model_copy(update={"name": name}))
        grown = plan.model_copy(update={"points": [*plan.points, *added]})
        return grown, {"added_points": [p.name for p in added]}

    return grow


__all__ = ["replay"]
