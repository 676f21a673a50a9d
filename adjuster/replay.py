"""Replay a trace through the adjuster, window by window: the live tick on a trace.

`replay(plan, trace, slo, perfs, config)` cuts the trace into windows of `config.window_s`
aligned on multiples of it (trace seconds count from 00:00 of day 0, so 1 h windows are
clock hours, as live), and at the end of each window runs `live.tick`, the code the live
adjuster runs, with the trace as its request log (`TraceSource`), a `SimBackend` (a hop is
the same `apply_point`, nothing starts) and a state store in a temporary folder. The tick
simulates every point on the window (and the forecast) to decide; a hop decided at the end
of a window is in force from the next window on.

Scoring: one continuous run, as the live gateway serves. The scored windows are cut where
the point in force changes; each piece (a segment) is one run of the simulator of its point
on its requests, carrying the engines' state (awake or asleep, caches, queues) from one hour
to the next, so a point held all along (`static`, and the adjusted series when it makes no
hop) is one run over the whole scored span: `planner evaluate`'s figures. Only at a hop does
a run start afresh (gpu-tier instances awake, host/disk ones awake as long as they displace
nobody), and requests still running at a segment's end finish in that segment's run.
`series`: per scored window, the point in force, its warm GiB (the run's memory curve over
the window), the requests per model, the switch waits (count, P95) and the attainment.

Cost of a hop: the steps `apply_point` took (`observe.cost_of_steps`, timed by the target's
perf model, one after another). A model all of whose instances the hop (re)starts or wakes
is unavailable until the first of them is up, counted from the segment's start: its requests
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

Aggregation: per-request arrays of all segments are concatenated and the percentiles
recomputed (switch P95 over requests that waited, as `SimResult`; substituted share and
quality cost over all requests); warm GiB is each run's GiB-hours over the sum of their spans
(as `evaluate` averages one run); `gpus_used` is the most any run used; `refused` sums the
unserved requests of every run by reason.
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
from planner.adjuster.reoptimize_policy import PointPerfs, ReoptimizePolicy
from planner.adjuster.state import StateStore
from planner.optimizer.sim.metrics import SimResult, met_slo, percentiles
from planner.schemas.plan import Plan, Point
from planner.schemas.slo import Slo

Progress = Callable[[int, int], None]


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
        self,
        sim: SimResult,
        ttft: np.ndarray | None = None,
        wait: np.ndarray | None = None,
        met: np.ndarray | None = None,
        extra_wakes: int = 0,
    ) -> None:
        """One continuous run (a segment, or the whole span held)."""
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
        if n:  # warm memory over the run's span, as `evaluate` averages it
            self.gib_s += sim.warm_gpu_gib_hours * 3600.0  # GiB x s
            self.span_s += max(sim.end_s - sim.start_s, 0.0)
        self.gpus = max(self.gpus, sim.gpus_used)
        self.refused.update(sim.refused())

    def metrics(self) -> dict[str, Any]:
        """The keys of `planner evaluate --json` (per point), over the whole trace."""

        def cat(xs: list[np.ndarray], dt: type) -> np.ndarray:
            return np.concatenate(xs) if xs else np.zeros(0, dt)

        ttft = cat(self.ttft, float)
        tpot = cat(self.tpot, float)
        wait = cat(self.wait, float)
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
    sim: SimResult, point: Point, cost: HopCost, start_s: float, window: pd.DataFrame, slo: Slo
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
    perfs: PointPerfs,
    config: AdjustConfig | None = None,
    *,
    start_point: str | None = None,
    sleep_supported: bool = True,
    progress: Progress | None = None,
    reoptimizer: ReoptimizePolicy | None = None,
    warmup_s: float = 0.0,
) -> dict[str, Any]:
    """Walk `trace` through `live.tick`; `{"adjusted", "static", "hops", "reoptimizations",
    "actions", "decisions" (one per window), ...}`.

    `perfs`: point name -> (instance id -> InstancePerf), e.g. from `perfs_for_point`.
    `reoptimizer` (with `config.reoptimize == "auto"`): asked for points on the recent traffic
    when the policy asks to re-optimize; they join the plan. `warmup_s`: the windows of the
    first `warmup_s` of the trace are decided on (history for the forecast, drift alarms,
    hops) but left out of every series, like the log a live adjuster already has.
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
    start = start_point or plan.selected

    log = _Log()
    in_force: list[tuple[str, HopCost | None]] = []  # per window: the point, the hop made into it
    pending: HopCost | None = None  # the hop made at the end of the previous window
    source, backend = TraceSource(trace), SimBackend(sleep_supported)
    start_state = AdjustState(point=start, since_s=first, config=cfg)
    tcfg = TickConfig(
        policy=cfg,
        slo=slo,
        perfs=perfs,
        plan_sha="replay",
        model_names=model_names,
        start=start_state,
        reoptimize=_Grower(reoptimizer, perfs) if reoptimizer is not None else None,
    )
    with tempfile.TemporaryDirectory(prefix="planner-replay-") as tmp, StateStore(tmp) as store:
        apply_point(plan, start, backend=backend, state=store, model_path_resolver=lambda i: "")
        state = start_state
        for k in range(n_win):
            end_s = first + (k + 1) * w
            res = tick(end_s, source, backend, store, plan, tcfg)
            in_force.append((res.state_before.point, pending))
            pending = res.hop
            log.record(res, end_s)
            plan, state = res.plan, res.state
            if progress is not None:
                progress(k + 1, n_win)
    run = _Run(plan, trace, slo, perfs, model_names, cfg)
    k0 = min(n_win, int(np.ceil(max(warmup_s, 0.0) / w - 1e-9)))  # the first scored window
    static = {n: run.series([(n, None, first + k0 * w, first + n_win * w)]) for n in names}
    adjusted = run.series(_segments(in_force, k0, first, w))
    return {
        "adjusted": adjusted.metrics(),
        "static": {n: s.metrics() for n, s in static.items()},
        **log.to_json(),
        "series": run.per_window(first, w, k0, in_force),
        "windows": n_win,
        "window_s": w,
        "start_point": start,
        "final_point": state.point,
        **log.hop_rates(n_win * w),
        "config": cfg.model_dump(mode="json"),
    }


Segment = tuple[str, HopCost | None, float, float]  # point, hop made into it, start s, end s


def _segments(
    in_force: list[tuple[str, HopCost | None]], k0: int, first: float, w: float
) -> list[Segment]:
    """The scored windows (from `k0`) cut where the point in force changes (or a hop is made
    into the same point): each segment is one continuous run of its point."""
    out: list[Segment] = []
    for k in range(k0, len(in_force)):
        name, hop = in_force[k]
        a, b = first + k * w, first + (k + 1) * w
        if out and out[-1][0] == name and hop is None:
            out[-1] = (name, out[-1][1], out[-1][2], b)
        else:
            out.append((name, hop, a, b))
    return out


class _Run:
    """Continuous runs of the simulator: a point held over a span carries its engines' state
    (awake, asleep, caches, queues) from one hour to the next, as the live gateway does; a
    hop starts a new run where it lands, with its waits charged (`_charge_hop`)."""

    def __init__(
        self,
        plan: Plan,
        trace: pd.DataFrame,
        slo: Slo,
        perfs: PointPerfs,
        model_names: list[str],
        cfg: AdjustConfig,
    ):
        self.plan = plan
        self.trace = trace
        self.slo = slo
        self.perfs = perfs
        self.model_names, self.cfg = model_names, cfg
        self.ts = trace["timestamp"].to_numpy(float)
        self.sims: dict[tuple[str, float, float], SimResult] = {}  # (point, start, end) -> run

    def sim(self, seg: Segment) -> tuple[SimResult, pd.DataFrame]:
        """(SimResult of the segment's point on its requests, those requests)."""
        from planner.optimizer.sim.simulator import simulate

        name, _, a, b = seg
        lo, hi = np.searchsorted(self.ts, [a, b])
        part = self.trace.iloc[int(lo) : int(hi)]
        key = (name, a, b)
        if key not in self.sims:
            self.sims[key] = simulate(
                self.plan.point(name),
                self.perfs[name],
                part,
                self.slo,
                model_names=self.model_names,
                sleep_after_idle_s=self.cfg.sleep_after_idle_s,
            )
        return self.sims[key], part

    def charged(self, seg: Segment) -> tuple[SimResult, np.ndarray, np.ndarray, np.ndarray, int]:
        """(sim, TTFT, switch wait, SLO mask, extra wakes) of a segment, the hop's waits in."""
        sim, part = self.sim(seg)
        name, hop, a, _ = seg
        if hop is None:
            return sim, sim.ttft_s, sim.switch_wait_s, sim.met_slo, 0
        t, q, m = _charge_hop(sim, self.plan.point(name), hop, a, part, self.slo)
        return sim, t, q, m, hop.starts + hop.wakes

    def series(self, segments: list[Segment]) -> _Series:
        out = _Series()
        for seg in segments:
            sim, t, q, m, extra = self.charged(seg)
            out.add(sim, ttft=t, wait=q, met=m, extra_wakes=extra)
        return out

    def per_window(
        self, first: float, w: float, k0: int, in_force: list[tuple[str, HopCost | None]]
    ) -> list[dict[str, Any]]:
        """Per scored window of the adjusted run: the point in force, its warm GiB, the
        requests per model, the switch waits (count, P95) and the attainment."""
        from planner.adjuster.policy_lean import floor_gib

        rows = []
        for seg in _segments(in_force, k0, first, w):
            sim, _, q, m, _ = self.charged(seg)
            point = self.plan.point(seg[0])
            # a run starts at its first request: after a hop, the hours before it hold what
            # the hop left awake until the idle sleep, then the point with nothing to do
            idle = (
                (seg[2] + point.idle_sleep_s, floor_gib(point))
                if seg[1] is not None and point.idle_sleep_s
                else None
            )
            arr = np.asarray(sim.arrival_s, float)
            wait = np.asarray(q)
            met = np.asarray(m)
            names = np.asarray(sim.model_names, dtype=object)[np.asarray(sim.model, int)]
            a = seg[2]
            while a < seg[3] - 1e-6:
                b = a + w
                mask = (arr >= a) & (arr < b)
                waits = wait[mask]
                waits = waits[np.isfinite(waits) & (waits > 0)]
                p95 = float(np.percentile(waits, 95)) if len(waits) else 0.0
                rows.append(
                    {
                        "start_s": a,
                        "point": seg[0],
                        "hop": seg[1] is not None and a == seg[2],
                        "warm_gpu_gib": round(_curve_gib(sim, a, b, idle), 3),
                        "requests": dict(sorted(Counter(str(x) for x in names[mask]).items())),
                        "switch_waits": len(waits),
                        "switch_p95_s": round(p95, 3),
                        "slo_attainment": round(float(met[mask].mean()), 5) if mask.any() else None,
                    }
                )
                a = b
        return rows


def _curve_gib(
    sim: SimResult, a: float, b: float, idle: tuple[float, float] | None = None
) -> float:
    """A run's mean warm GiB over [a, b) from its memory curve (a step function; before its
    first time the first level, after its last the last). `idle`: (from when, GiB): before
    the first time, from then on that level instead (a run after a hop whose first request
    comes after the idle sleep: the instances the hop left awake slept by then)."""
    times, gib = (np.asarray(x, float) for x in sim.memory_curve)
    if not len(times):
        return float(sim.warm_gpu_gib)
    before = gib[0]
    if idle is not None and idle[0] < times[0]:
        times, gib = np.concatenate([[idle[0]], times]), np.concatenate([[idle[1]], gib])
    edges = np.clip(np.concatenate([[a], times, [b]]), a, b)
    levels = np.concatenate([[before], gib])
    return float((np.diff(edges) * levels).sum() / max(b - a, 1e-9))


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
        self.decisions.append(
            {
                "at_s": end_s,
                "kind": act.kind,
                "from": act.from_point,
                "point": act.point,
                "requests": len(win),
                "forecast_window_requests": list(res.forecast_requests),
                "reason": act.reason,
            }
        )
        if act.kind == "hop":
            assert res.hop is not None
            self.hops.append(
                {
                    "at_s": end_s,
                    "from": act.from_point,
                    "to": act.point,
                    "reason": act.reason,
                    "restarts": res.hop.starts,
                    "wakes": res.hop.wakes,
                    "sleeps": res.hop.sleeps,
                    "stops": res.hop.stops,
                    "tiers_only": res.hop.tiers_only,
                }
            )
        elif act.kind != "hold":
            entry = {"at_s": end_s, "kind": act.kind, "point": act.point, "reason": act.reason}
            self.actions.append({**entry, **res.report})
            if act.kind == "reoptimize":
                self.reopts.append(
                    {
                        "at_s": end_s,
                        "from": act.from_point,
                        "reason": act.reason,
                        "window_requests": len(win),
                        **res.report,
                    }
                )

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


class _Grower:
    """`TickConfig.reoptimize` of a replay: the new points join the plan (`<name>@<hour>h`)
    and their perfs join `perfs` (the tick's)."""

    def __init__(self, reoptimizer: ReoptimizePolicy, perfs: PointPerfs) -> None:
        self.reoptimizer = reoptimizer
        self.perfs = perfs

    def points(self, recent: pd.DataFrame) -> tuple[list[Point], PointPerfs]:
        """The replay's re-optimizer's (a ReoptimizePolicy has both calls)."""
        return self.reoptimizer.points(recent)

    def reoptimize(
        self, recent: pd.DataFrame, now_s: float, plan: Plan
    ) -> tuple[Plan, dict[str, Any]]:
        points, new_perfs = self.reoptimizer.points(recent)
        tag = f"@{int(now_s // 3600)}h"
        added = []
        for p in points:
            name = p.name + tag
            self.perfs[name] = new_perfs[p.name]
            added.append(p.model_copy(update={"name": name}))
        grown = plan.model_copy(update={"points": [*plan.points, *added]})
        return grown, {"added_points": [p.name for p in added]}


__all__ = ["replay"]
