"""The hop policy of `planner adjust`: one pure decision per window of traffic.

`decide(state, obs) -> (state, actions)` is the same code live (cli/adjust.py), in replay
(adjuster/replay.py) and in tests. It does no I/O and reads no clock: the caller builds the
`Observation` (the window, its end time, every plan point's simulated metrics on it, the
drift reports and the cost of hopping to each point) with `observe(...)`, passing the
simulator as a `Scorer`.

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
   0.93); no point meets it in `confirm_windows` consecutive windows: `reoptimize` (auto),
   `suggest` (with the exact command) or hold (never), at most once per `min_dwell_s`;
3. objective of a point, in seconds: J = switch P95 + `gib_weight_s` x warm GiB (the same
   trade-off the optimizer's default scalarization makes);
4. hop to the meeting point with the lowest J only when all of these hold:
   - traffic moved: drift fired against the plan's `workload_summary` or against the window
     the current point was chosen on, or the current point misses the SLO (so stationary
     traffic, whose drift is calibrated to fire in no window, never hops);
   - the current point has been in force for `min_dwell_s` and fewer than `max_hops_per_day`
     hops happened in the last 24 h;
   - the same point clears the bar below in `confirm_windows` consecutive windows (one busy
     hour is not a trend);
   - the gain J(current) - J(best) exceeds `margin` x J(current) + (`min_gain_s` +
     `hop_cost_weight` x hop cost) x min(1, requests / `min_requests`) (requests: of the
     window, or when tracking the forecast of the window the hop lands in; the absolute floor
     guards against latency noise and the hop cost is paid in delayed requests: both
     scale with the traffic; a quiet window has neither), where the hop cost
     is the transition seconds the reconcile diff between the two points implies (cold
     starts of the instances it starts or restarts, wakes, sleeps of the new lazy ones, a
     fixed cost per stop) from the perf model.
     A current point that misses the SLO is left for any meeting point (no margin).
Every action carries its reasons: drift verdicts and fired dimensions, every point's
metrics and objective, the gain and the threshold it had to pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from planner.schemas.plan import Plan, Point

DAY_S = 86400.0


class AdjustConfig(BaseModel):
    """Parameters of the hop policy; each typed, ranged, defaulted and documented."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_s: float = Field(
        default=3600.0, ge=60, le=7 * DAY_S, description="length of a decision window, s"
    )
    min_dwell_s: float = Field(
        default=7200.0,
        ge=0,
        le=30 * DAY_S,
        description="least time a point stays in force before the next hop, s",
    )
    max_hops_per_day: int = Field(default=3, ge=0, le=96, description="most hops in any 24 h")
    confirm_windows: int = Field(
        default=2, ge=1, le=48, description="consecutive windows the same better point must win"
    )
    margin: float = Field(
        default=0.15,
        ge=0,
        le=10,
        description="share of the current objective a better point must win by",
    )
    min_gain_s: float = Field(
        default=0.25, ge=0, le=3600, description="absolute objective gain a hop needs on top, s"
    )
    gib_weight_s: float = Field(
        default=0.01, ge=0, le=100, description="objective seconds one warm GiB is worth (s/GiB)"
    )
    hop_cost_weight: float = Field(
        default=0.01, ge=0, le=10, description="objective seconds per second of hop transitions"
    )
    cold_start_weight: float = Field(
        default=1.0, ge=0, le=100, description="weight of the cold starts and wakes a hop implies"
    )
    sleep_weight: float = Field(
        default=1.0, ge=0, le=100, description="weight of the sleeps a hop implies"
    )
    stop_cost_s: float = Field(
        default=2.0, ge=0, le=600, description="transition seconds charged per stopped instance"
    )
    min_requests: int = Field(
        default=30, ge=1, le=1_000_000, description="fewer requests in a window: hold"
    )
    attainment_z: float = Field(
        default=2.0,
        ge=0,
        le=10,
        description="binomial standard errors of slack on the attainment target",
    )
    track_after_drift_s: float = Field(
        default=DAY_S,
        ge=0,
        le=30 * DAY_S,
        description="drift alarms older than this no longer count towards tracking, s",
    )
    track_min_alarms: int = Field(
        default=2, ge=1, le=1000, description="drift alarms within that time that start tracking"
    )
    forecast_windows: int = Field(
        default=3,
        ge=0,
        le=24,
        description="windows ahead a tracking decision looks (the same hours a day earlier); 0: none",
    )
    require_drift: bool = Field(
        default=True, description="hop only when drift fired or the current point misses the SLO"
    )
    sleep_after_idle_s: float | None = Field(
        default=None,
        ge=0,
        le=DAY_S,
        description="simulate host/disk instances sleeping after this idle time (the gateway's); None: never",
    )
    reoptimize: Literal["auto", "suggest", "never"] = Field(
        default="suggest", description="when no point meets the SLO"
    )
    reoptimize_evals: int = Field(
        default=8, ge=1, le=500, description="evaluations of a warm-started re-optimization"
    )


class AdjustState(BaseModel):
    """What the policy remembers between windows (JSON in the live journal)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    point: str = Field(description="the point in force")
    since_s: float | None = Field(
        default=None, description="when it came in force; None: before the first decision"
    )
    chosen_summary: dict[str, Any] | None = Field(
        default=None,
        description="workload summary of the window it was chosen on (None: the plan's)",
    )
    hop_times_s: list[float] = Field(
        default_factory=list, description="times of the hops of the last 24 h"
    )
    last_reoptimize_s: float | None = Field(
        default=None, description="when reoptimize/suggest was last issued"
    )
    decisions: int = Field(default=0, ge=0, description="decisions taken so far")
    candidate: str | None = Field(default=None, description="point that won the last windows")
    candidate_wins: int = Field(default=0, ge=0, description="consecutive windows it won")
    failing_windows: int = Field(
        default=0, ge=0, description="consecutive windows in which no point met the SLO"
    )
    drift_times_s: list[float] = Field(
        default_factory=list, description="times of the drift alarms that still count"
    )
    config: AdjustConfig = Field(default_factory=AdjustConfig)


@dataclass(frozen=True)
class HopCost:
    """What moving from one point to another implies, from the reconcile diff."""

    starts: int = 0  # starts and restarts (each a cold start)
    sleeps: int = 0
    stops: int = 0
    cold_start_s: float = 0.0  # sum of the cold starts and wakes, s
    sleep_s: float = 0.0  # sum of the sleeps, s
    wakes: int = 0  # asleep instances woken (moved to the gpu tier)
    # instance id -> s until it serves, for every instance (re)started or woken; the replay
    # delays a model all of whose instances are in here
    restarted: dict[str, float] = field(default_factory=dict)

    def seconds(self, cfg: AdjustConfig) -> float:
        """Transition seconds, weighted as the config says."""
        return (
            cfg.cold_start_weight * self.cold_start_s
            + cfg.sleep_weight * self.sleep_s
            + cfg.stop_cost_s * self.stops
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "starts": self.starts, "sleeps": self.sleeps, "stops": self.stops,
            "cold_start_s": round(self.cold_start_s, 3), "sleep_s": round(self.sleep_s, 3),
            "wakes": self.wakes,
        }  # fmt: skip


@dataclass(frozen=True)
class Observation:
    """One window as the policy sees it."""

    end_s: float  # end of the window, s (trace time live: epoch s)
    window: pd.DataFrame  # the window's requests (trace schema)
    metrics: dict[str, dict[str, Any]]  # point name -> `SimResult.to_metrics()` on the window
    hop_costs: dict[str, HopCost]  # point name -> cost of hopping there from the current point
    target_attainment: float  # the SLO's attainment target
    drift_plan: Any = None  # DriftReport vs the plan's workload_summary (None: no reference)
    drift_chosen: Any = None  # DriftReport vs the window the current point was chosen on
    # point name -> metrics on the forecast (the next windows as they went a day earlier);
    # empty: no forecast
    forecast: dict[str, dict[str, Any]] = field(default_factory=dict)
    # forecast requests in each of the next windows (the first: the one a hop lands in)
    forecast_window_requests: tuple[int, ...] = ()
    suggest_command: str = ""  # the `planner optimize ...` line a suggest prints


@dataclass(frozen=True)
class Action:
    """One thing to do after a window: hold, hop, reoptimize or suggest."""

    kind: Literal["hold", "hop", "reoptimize", "suggest"]
    point: str  # the point in force after the action (the hop's target for a hop)
    reason: str  # one line
    reasons: dict[str, Any] = field(default_factory=dict)  # drift, per-point metrics, thresholds
    from_point: str = ""
    command: str = ""  # suggest: the exact command

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "point": self.point, "from": self.from_point,
            "reason": self.reason, "command": self.command, "reasons": self.reasons,
        }  # fmt: skip


class Scorer(Protocol):
    """Simulates one plan point on one window and returns `SimResult.to_metrics()`."""

    def __call__(self, point: Point, window: pd.DataFrame) -> dict[str, Any]: ...


# ------------------------------------------------------------------------- the decision


def objective_s(m: dict[str, Any], cfg: AdjustConfig) -> float:
    """J = switch P95 + gib_weight_s x warm GiB, s."""
    return float(m["switch_p95_s"]) + cfg.gib_weight_s * float(m["warm_gpu_gib"])  # s + s/GiB * GiB


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

    meeting = [p for p in sorted(obs.metrics) if table[p]["meets_slo"]]
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
        if fails < cfg.confirm_windows:
            base = base.model_copy(update={"failing_windows": fails})
            return hold(f"{why}; {fails} of {cfg.confirm_windows} windows")
        kind: Literal["reoptimize", "suggest"] = (
            "reoptimize" if cfg.reoptimize == "auto" else "suggest"
        )
        st = base.model_copy(update={"last_reoptimize_s": now})
        act = Action(
            kind, cur, why, {**reasons, "action": kind}, from_point=cur, command=obs.suggest_command
        )
        return st, [act]

    cur_ok = table[cur]["meets_slo"]
    if ahead:  # two witnesses: a target must meet the SLO on both, the current miss on both
        meeting = [p for p in meeting if table[p]["forecast_meets_slo"]] or meeting
        cur_ok = cur_ok or table[cur]["forecast_meets_slo"]
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
    cost = obs.hop_costs.get(best, HopCost())
    cost_s = cost.seconds(cfg)
    gain = j_cur - score(best)
    # the hop's transitions fall in the next window: only its traffic feels them
    nxt = fc_n[0] if ahead and fc_n else n
    felt = min(1.0, nxt / cfg.min_requests)
    need = cfg.margin * j_cur + (cfg.min_gain_s + cfg.hop_cost_weight * cost_s) * felt
    reasons["gain_s"] = round(gain, 4)
    reasons["needed_gain_s"] = round(need, 4)
    reasons["hop_cost_s"] = round(cost_s, 3)
    if cur_ok and gain <= need:
        return hold(f"{best} wins by {gain:.2f} s, not the {need:.2f} s a hop needs")
    wins = state.candidate_wins + 1 if state.candidate == best else 1
    if wins < (1 if ahead else cfg.confirm_windows):
        base = base.model_copy(update={"candidate": best, "candidate_wins": wins})
        return hold(
            f"{best} wins by {gain:.2f} s > {need:.2f} s in {wins} of {cfg.confirm_windows} windows"
        )
    from planner.optimizer.workload.characterize import summarize

    why = (
        f"{cur} misses the SLO ({table[cur]['slo_attainment']:.1%}); {best} meets it"
        if not cur_ok
        else f"{best} wins by {gain:.2f} s > {need:.2f} s (margin + hop cost {cost_s:.0f} s)"
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


def _plain(summary: Any) -> dict[str, Any]:
    return summary.model_dump(mode="json") if hasattr(summary, "model_dump") else dict(summary)


# ------------------------------------------------------------------ building an observation


def hop_cost(
    src: Point, dst: Point, perfs: dict[str, Any], *, sleep_supported: bool = True
) -> HopCost:
    """Cost of turning `src` (as running: gpu tier awake, lazy tiers asleep) into `dst`.

    Uses the apply engine's own diff, so the estimate counts exactly the starts, restarts,
    sleeps and stops `apply` would run; seconds come from `dst`'s InstancePerf (`perfs`:
    instance id -> InstancePerf of the target point).
    """
    from planner.adjuster.reconcile import Observed, diff, spec_sha

    if src is dst or src.instances == dst.instances:
        return HopCost()
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
    starts = sleeps = stops = wakes = 0
    cold = slp = 0.0
    restarted: dict[str, float] = {}
    for a in diff(dst, actual, sleep_supported=sleep_supported):
        p = perfs.get(a.instance)
        if a.kind in ("start", "restart", "wake"):
            if a.kind == "wake":
                wakes += 1
                host = actual[a.instance].tier == "host"
                c = 0.0 if p is None else float(p.wake_host_s if host else p.wake_disk_s)
            else:
                starts += 1
                c = 0.0 if p is None else float(p.cold_start_s)
            cold += c
            restarted[a.instance] = c
        elif a.kind == "sleep":
            sleeps += 1
            slp += float(p.sleep_s) if p is not None else 0.0
        elif a.kind == "stop":
            stops += 1
    return HopCost(starts, sleeps, stops, cold, slp, wakes, restarted)


def observe(
    plan: Plan,
    state: AdjustState,
    window: pd.DataFrame,
    end_s: float,
    scorer: Scorer,
    perfs: dict[str, dict[str, Any]],
    target_attainment: float,
    *,
    metrics: dict[str, dict[str, Any]] | None = None,
    sleep_supported: bool = True,
    suggest_command: str = "",
    forecast: pd.DataFrame | None = None,
    forecast_metrics: dict[str, dict[str, Any]] | None = None,
) -> Observation:
    """Everything `decide` needs about one window (simulates each point unless `metrics`).

    `perfs`: point name -> (instance id -> InstancePerf). Drift runs only on windows with
    enough requests (it calls them `too_few_requests` otherwise anyway). `forecast`: the
    next `forecast_windows` windows as they went a day earlier (None: no history), scored
    unless `forecast_metrics`.
    """
    from planner.optimizer.workload.drift import drift

    if metrics is None:
        metrics = {p.name: scorer(p, window) for p in plan.points}
    cfg = state.config
    if forecast is not None and forecast_metrics is None and cfg.forecast_windows:
        forecast_metrics = {p.name: scorer(p, forecast) for p in plan.points}
    cur = plan.point(state.point)
    costs = {
        p.name: hop_cost(cur, p, perfs[p.name], sleep_supported=sleep_supported)
        for p in plan.points
    }
    d_plan = d_chosen = None
    if len(window) >= state.config.min_requests:
        if plan.workload_summary.get("requests"):
            d_plan = drift(plan.workload_summary, window)  # type: ignore[arg-type]
        if state.chosen_summary:
            d_chosen = drift(state.chosen_summary, window)  # type: ignore[arg-type]
    return Observation(
        end_s=end_s,
        window=window,
        metrics=metrics,
        hop_costs=costs,
        target_attainment=target_attainment,
        drift_plan=d_plan,
        drift_chosen=d_chosen,
        suggest_command=suggest_command,
        forecast=forecast_metrics or {},
        forecast_window_requests=_per_window(forecast, end_s - DAY_S, cfg)
        if forecast is not None and cfg.forecast_windows
        else (),
    )


def _per_window(df: pd.DataFrame, start_s: float, cfg: AdjustConfig) -> tuple[int, ...]:
    """Requests in each of the `forecast_windows` windows from `start_s`."""
    edges = start_s + cfg.window_s * np.arange(cfg.forecast_windows + 1)
    return tuple(int(c) for c in np.diff(np.searchsorted(df["timestamp"].to_numpy(float), edges)))


__all__ = [
    "Action",
    "AdjustConfig",
    "AdjustState",
    "HopCost",
    "Observation",
    "Scorer",
    "decide",
    "hop_cost",
    "meets_slo",
    "objective_s",
    "observe",
]
