"""What `policy.decide`'s gates read of a window: the objective, the SLO test with its noise
slack, every point's row of the decision's reasons and the state a hold leaves
(`WindowView`, built by `view`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from planner.adjuster.policy_types import (
    DAY_S,
    AdjustConfig,
    AdjustState,
    Decision,
    Observation,
    PointEstimate,
    PointRow,
)
from planner.optimizer.point_metrics import PointMetrics

Outcome = tuple[AdjustState, list[Decision]]  # the state after the window, what to do


def objective_s(switch_s: float, warm_gib: float, cfg: AdjustConfig) -> float:
    """J = switch P95 + gib_weight_s x warm GiB, s."""
    return switch_s + cfg.gib_weight_s * float(warm_gib)  # s + s/GiB * GiB


def meets_slo(m: PointMetrics, target: float, cfg: AdjustConfig) -> bool:
    """Attainment at least the target less `attainment_z` binomial standard errors."""
    n = max(int(m.requests), 1)
    slack = cfg.attainment_z * math.sqrt(max(target * (1.0 - target), 0.0) / n)
    return float(m.slo_attainment) >= target - slack


def _objective(e: PointEstimate, cfg: AdjustConfig) -> float:
    """J of a point as observed: its switch P95 as estimated (`switch_est_s`)."""
    return objective_s(float(e.switch_est_s), e.metrics.warm_gpu_gib, cfg)


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


@dataclass
class WindowView:
    """One decision's view of its window: what every gate reads, the state a hold leaves
    (`base`) and the reasons every action carries."""

    state: AdjustState  # before the window
    obs: Observation
    base: AdjustState
    rows: dict[str, PointRow]
    reasons: dict[str, Any]
    recent: list[float]  # hop times of the last 24 h
    since: float  # when the current point came in force
    fired: bool  # drift fired on this window
    tracking: bool  # drift alarms enough to track the traffic
    ahead: bool  # tracking with a forecast of every point: the forecast is the second witness
    failed: set[str]  # points seen missing the SLO on traffic beyond the plan

    @property
    def cfg(self) -> AdjustConfig:
        return self.state.config

    @property
    def cur(self) -> str:
        return self.state.point

    @property
    def now(self) -> float:
        return self.obs.end_s

    def score(self, p: str) -> float:
        """The objective a point is chosen by: the worse of window and forecast when ahead."""
        r = self.rows[p]
        if self.ahead:
            return max(r.objective_s, r.forecast_objective_s)  # type: ignore[type-var]
        return r.objective_s

    def hop(self, best: str, why: str) -> Outcome:
        """Hop to `best`: the state the hop leaves (the window it was chosen on, the hop's
        time) and the decision."""
        from planner.optimizer.workload.characterize import summarize

        summary = summarize(self.obs.window)
        plain = summary.model_dump(mode="json") if hasattr(summary, "model_dump") else dict(summary)
        st = self.base.model_copy(
            update={
                "point": best,
                "since_s": self.now,
                "chosen_summary": plain,
                "hop_times_s": [*self.recent, self.now],
            }
        )
        reasons = {**self.reasons, "action": "hop", "to": best}
        return st, [Decision("hop", best, why, reasons, from_point=self.cur)]

    def hold(self, why: str, **update: Any) -> Outcome:
        """Stay at the current point; `update`: what the state remembers of this window."""
        st = self.base.model_copy(update=update) if update else self.base
        act = Decision("hold", self.cur, why, {**self.reasons, "action": "hold"}, self.cur)
        return st, [act]


def _rows(obs: Observation, cfg: AdjustConfig, ahead: bool) -> dict[str, PointRow]:
    """Every point's row of the decision's reasons (the forecast's figures when ahead)."""
    target = obs.target_attainment
    rows = {}
    for name, e in sorted(obs.metrics.items()):
        m = e.metrics
        row = PointRow(
            slo_attainment=round(float(m.slo_attainment), 5),
            switch_p95_s=round(float(m.switch_p95_s), 4),
            ttft_p95_s=round(float(m.ttft_p95_s), 4),
            warm_gpu_gib=round(float(m.warm_gpu_gib), 3),
            objective_s=round(_objective(e, cfg), 4),
            meets_slo=meets_slo(m, target, cfg),
            hop_cost=obs.hop_costs[name].to_json() if name in obs.hop_costs else None,
        )
        if ahead:
            f = obs.forecast[name]
            row = replace(
                row,
                forecast_objective_s=round(_objective(f, cfg), 4),
                forecast_meets_slo=meets_slo(f.metrics, target, cfg),
            )
        rows[name] = row
    return rows


def view(state: AdjustState, obs: Observation) -> WindowView:
    """The window as the gates read it, and the state a hold leaves."""
    cfg, now = state.config, obs.end_s
    since = state.since_s if state.since_s is not None else now
    recent = [t for t in state.hop_times_s if now - t < DAY_S]
    fired = _fired(obs.drift_plan) or _fired(obs.drift_chosen)
    alarms = [t for t in state.drift_times_s if now - t < cfg.track_after_drift_s]
    alarms += [now] if fired else []
    tracking = len(alarms) >= cfg.track_min_alarms
    # a point seen missing the SLO (beyond the noise slack) on traffic beyond the plan lacks
    # the capacity that traffic needs, and it comes back (busy days): it stays unfit
    failed = set(state.failed_beyond_plan)
    if obs.beyond_plan:
        target = obs.target_attainment
        failed |= {p for p, e in obs.metrics.items() if not meets_slo(e.metrics, target, cfg)}
    base = state.model_copy(
        update={
            "drift_times_s": alarms,
            "since_s": since,
            "hop_times_s": recent,
            "decisions": state.decisions + 1,
            "candidate": None,
            "candidate_wins": 0,
            "failing_windows": 0,
            "failed_beyond_plan": sorted(failed),
        }
    )
    ahead = tracking and bool(obs.forecast) and set(obs.metrics) <= set(obs.forecast)
    rows = _rows(obs, cfg, ahead)
    reasons: dict[str, Any] = {
        "window_end_s": now,
        "requests": len(obs.window),
        "drift_plan": _drift_json(obs.drift_plan),
        "drift_chosen": _drift_json(obs.drift_chosen),
        "points": {n: r.to_json() for n, r in rows.items()},
        "current": state.point,
        "in_force_s": round(now - since, 1),
        "tracking": tracking,
        "forecast_window_requests": list(obs.forecast_window_requests) if ahead else None,
        "forecast_dropped": obs.forecast_dropped,
        "beyond_plan": list(obs.beyond_plan),
    }
    return WindowView(
        state, obs, base, rows, reasons, recent, since, fired, tracking, ahead, failed
    )
