"""Replay a trace through the hop policy, window by window (pure: no files, no clock).

`replay(plan, trace, slo, perfs, config)` cuts the trace into windows of `config.window_s`
aligned on multiples of it (trace seconds count from 00:00 of day 0, so 1 h windows are
clock hours, as live), and for each window:
1. simulates every point of the plan on the window's requests (the same `simulate` the
   optimizer scores with);
2. the point in force takes that window's simulated requests as its own (adjusted series);
   every point's requests also go to its static series (that point held all along);
3. `decide` sees the window (drift vs the plan's summary and vs the window the point was
   chosen on, every point's metrics, the cost of each hop, and every point's metrics on
   the forecast: the next `forecast_windows` windows of the trace one day earlier) and may
   hop: the new point is in force from the next window on.

Model of the carry-over at window edges (documented approximations, the same for the
adjusted and the static series so that they compare like with like): each window is
simulated from a fresh start of its point (gpu-tier instances awake, host/disk ones awake
as long as they displace nobody, no prefix cache), and requests still running at a window's
end finish in that window's simulation.

Cost of a hop: the reconcile diff between the two points (`policy.hop_cost`) lists the
instances the hop starts or restarts. A model all of whose instances in the new point are
(re)started is unavailable until the first of them is up (`cold_start_s` of the perf
model, counted from the window's start): its requests arriving before then wait that much
longer (added to TTFT and to the switch wait, and the SLO check is redone), and every
(re)start counts as a switch. Requests of models that keep an instance are not delayed
(make-before-break).

Re-optimization: with `config.reoptimize == "auto"` and a `reoptimizer`, a `reoptimize`
action runs it on the last `lookback_s` of traffic and its points join the plan (they are
scored from the next window on; `static` keeps only the plan's own points). Without one,
`reoptimize`/`suggest` actions are only listed.

Aggregation: per-request arrays of all windows are concatenated and the percentiles
recomputed (switch P95 over requests that waited, as `SimResult`); warm GiB is the
time-average over windows (each window's simulated average weighted by the window length);
`gpus_used` is the most any window used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from planner.adjuster.policy import DAY_S, AdjustConfig, AdjustState, HopCost, decide, observe
from planner.optimizer.sim.metrics import met_slo, percentiles
from planner.optimizer.sim.simulator import simulate
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
    wakes: int = 0
    gib_s: float = 0.0  # warm GiB x seconds
    span_s: float = 0.0
    gpus: int = 0

    def add(
        self, sim: Any, window_s: float, ttft=None, wait=None, met=None, extra_wakes: int = 0
    ) -> None:
        self.ttft.append(sim.ttft_s if ttft is None else ttft)
        self.tpot.append(sim.tpot_s)
        self.wait.append(sim.switch_wait_s if wait is None else wait)
        self.met.append(sim.met_slo if met is None else met)
        self.wakes += sim.wakes + extra_wakes
        self.gib_s += sim.warm_gpu_gib * window_s  # GiB x s
        self.span_s += window_s
        self.gpus = max(self.gpus, sim.gpus_used)

    def metrics(self) -> dict[str, Any]:
        """The keys of `planner evaluate --json` (per point), over the whole trace."""
        cat = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt)  # noqa: E731
        ttft, tpot, wait = cat(self.ttft, float), cat(self.tpot, float), cat(self.wait, float)
        met = cat(self.met, bool)
        return {
            "slo_attainment": float(met.mean()) if len(met) else 1.0,
            "ttft_p95_s": percentiles(ttft)["p95"],
            "tpot_p95_s": percentiles(tpot)["p95"],
            "switch_p95_s": percentiles(wait[wait > 0])["p95"],
            "switch_count": int(self.wakes),
            "warm_gpu_gib": self.gib_s / self.span_s if self.span_s > 0 else 0.0,
            "gpus_used": int(self.gpus),
            "requests": len(met),
        }


def _hop_delays(
    sim: Any, point: Point, cost: HopCost, start_s: float, window: pd.DataFrame, slo: Slo
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TTFT, switch wait and SLO mask of a window's requests after a hop at `start_s`."""
    ttft = sim.ttft_s.copy()
    wait = sim.switch_wait_s.copy()
    if not cost.restarted or not len(window):
        return ttft, wait, sim.met_slo
    ready: dict[str, float] = {}  # model -> when its first instance is up, s
    by_model: dict[str, list[str]] = {}
    for i in point.instances:
        by_model.setdefault(i.model, []).append(i.id)
    for model, ids in by_model.items():
        if all(i in cost.restarted for i in ids):
            ready[model] = start_s + min(cost.restarted[i] for i in ids)  # s
    arrival = window["timestamp"].to_numpy(float)
    models = window["model"].astype(str).to_numpy()
    for model, t_up in ready.items():
        late = (models == model) & (arrival < t_up) & np.isfinite(ttft)
        delay = np.where(late, t_up - arrival, 0.0)  # s each request waits for the restart
        ttft += delay
        wait += delay
    met = met_slo(sim.model, sim.model_names, ttft, sim.tpot_s, wait, slo)
    return ttft, wait, met


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
    lookback_s: float = 86400.0,
    warmup_s: float = 0.0,
) -> dict[str, Any]:
    """Walk `trace` through `decide`; `{"adjusted", "static", "hops", "actions", ...}`.

    `perfs`: point name -> (instance id -> InstancePerf), e.g. from `perfs_for_point`.
    `reoptimizer` (with `config.reoptimize == "auto"`): called on the last `lookback_s` of
    traffic when the policy asks to re-optimize; its points join the plan (named
    `<name>@<hour>h`) and compete from the next window on. `static` holds only the points
    of the plan as given (the ones that can be held all along). `warmup_s`: the windows of
    the first `warmup_s` of the trace are decided on (history for the forecast, drift
    alarms, hops) but left out of every series, like the log a live adjuster already has.
    Deterministic: same inputs, same output.
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
    edges = np.searchsorted(ts, first + w * np.arange(n_win + 1), side="left")
    edges[-1] = len(ts)

    static = {n: _Series() for n in names}
    adjusted = _Series()
    state = AdjustState(point=start_point or plan.selected, since_s=first, config=cfg)
    hops: list[dict[str, Any]] = []
    actions: list[dict[str, Any]] = []
    pending: HopCost | None = None  # the hop decided at the end of the previous window
    empty: dict[str, Any] = {}  # point -> its simulation of an empty window (one per point)
    for k in range(n_win):
        a, b = int(edges[k]), int(edges[k + 1])
        start_s, end_s = first + k * w, first + (k + 1) * w
        win = trace.iloc[a:b]
        sims: dict[str, Any] = {}
        for p in plan.points:
            if len(win) == 0 and p.name in empty:
                sims[p.name] = empty[p.name]
                continue
            sims[p.name] = simulate(
                p, perfs[p.name], win, slo, model_names=model_names,
                sleep_after_idle_s=cfg.sleep_after_idle_s,
            )  # fmt: skip
            if len(win) == 0:
                empty[p.name] = sims[p.name]
        cur = plan.point(state.point)
        if start_s >= first + warmup_s:
            for n in names:  # the plan's own points
                static[n].add(sims[n], w)
            if pending is not None:
                t, q, m = _hop_delays(sims[cur.name], cur, pending, start_s, win, slo)
                extra = pending.starts + pending.wakes
                adjusted.add(sims[cur.name], w, ttft=t, wait=q, met=m, extra_wakes=extra)
            else:
                adjusted.add(sims[cur.name], w)
        pending = None
        metrics = {n: sim.to_metrics() for n, sim in sims.items()}
        fc = fc_metrics = None
        if cfg.forecast_windows and end_s - DAY_S >= first:  # a day of history to look ahead with
            lo, hi = np.searchsorted(
                ts, [end_s - DAY_S, end_s - DAY_S + cfg.forecast_windows * w], side="left"
            )
            fc = trace.iloc[lo:hi]
            fc_metrics = {
                p.name: simulate(
                    p, perfs[p.name], fc, slo, model_names=model_names,
                    sleep_after_idle_s=cfg.sleep_after_idle_s,
                ).to_metrics()
                for p in plan.points
            }  # fmt: skip
        obs = observe(
            plan, state, win, end_s, scorer=_unused, perfs=perfs,
            target_attainment=slo.attainment, metrics=metrics, sleep_supported=sleep_supported,
            forecast=fc, forecast_metrics=fc_metrics,
        )  # fmt: skip
        state, acts = decide(state, obs)
        for act in acts:
            if act.kind == "hop":
                hops.append(
                    {"at_s": end_s, "from": act.from_point, "to": act.point, "reason": act.reason}
                )
                pending = obs.hop_costs[act.point]
            elif act.kind != "hold":
                actions.append(
                    {"at_s": end_s, "kind": act.kind, "point": act.point, "reason": act.reason}
                )
                if act.kind == "reoptimize" and reoptimizer is not None:
                    lo = int(np.searchsorted(ts, end_s - lookback_s, side="left"))
                    plan = _grow(plan, perfs, reoptimizer(trace.iloc[lo:b]), end_s, actions)
        if progress is not None:
            progress(k + 1, n_win)
    span_days = max(n_win * w / 86400.0, 1e-9)
    per_day: dict[int, int] = {}
    for h in hops:
        d = int(h["at_s"] // 86400)
        per_day[d] = per_day.get(d, 0) + 1
    return {
        "adjusted": adjusted.metrics(),
        "static": {n: s.metrics() for n, s in static.items()},
        "hops": hops,
        "actions": actions,
        "windows": n_win,
        "window_s": w,
        "start_point": start_point or plan.selected,
        "final_point": state.point,
        "hops_per_day": round(len(hops) / span_days, 3),
        "max_hops_per_day": max(per_day.values(), default=0),
        "config": cfg.model_dump(mode="json"),
    }


def _grow(
    plan: Plan,
    perfs: dict[str, dict[str, Any]],
    found: tuple[list[Point], dict[str, dict[str, Any]]],
    at_s: float,
    actions: list[dict[str, Any]],
) -> Plan:
    """The plan with the re-optimized points added (renamed `<name>@<hour>h`)."""
    points, new_perfs = found
    tag = f"@{int(at_s // 3600)}h"
    added = []
    for p in points:
        name = p.name + tag
        perfs[name] = new_perfs[p.name]
        added.append(p.model_copy(update={"name": name}))
    actions[-1]["added_points"] = [p.name for p in added]
    return plan.model_copy(update={"points": [*plan.points, *added]})


def _unused(point: Point, window: pd.DataFrame) -> dict[str, Any]:
    raise AssertionError("replay passes the metrics it simulated")  # never called


__all__ = ["replay"]
