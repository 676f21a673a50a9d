"""The hop policy's vocabulary: its settings, its memory, what it sees and what it does.

`AdjustConfig` (every setting typed, ranged, defaulted and documented once: the CLI's
`--policy KEY=VALUE` takes these fields), `AdjustState` (what the policy remembers between
windows: JSON in the live decision journal), `HopCost`, `PointEstimate` and `Observation`
(one window as `observe.observe` shows it to `policy.decide`), `PointRow` (a point in a
decision's reasons) and `Decision` (what `decide` returns).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from planner.optimizer.point_metrics import PointMetrics

DAY_S = 86400.0


class AdjustConfig(BaseModel):
    """Parameters of the hop policy; each typed, ranged, defaulted and documented."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_s: float = Field(
        default=3600.0, ge=60, le=7 * DAY_S, description="length of a decision window, s"
    )
    decision: Literal["lean", "objective"] = Field(
        default="lean",
        description="lean: the leanest point the forecast says meets every SLO target "
        "(policy_lean.py); objective: switch P95 + gib_weight_s x warm GiB (policy.py)",
    )
    history_days: int = Field(
        default=7, ge=1, le=28, description="days of request log the lean forecast's profile reads"
    )
    min_saving_share: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="lean: least share of the current point's warm GiB a hop to a leaner point saves",
    )
    max_attainment_loss: float = Field(
        default=0.005,
        ge=0,
        le=1,
        description="lean: most forecast attainment a hop to a leaner point may give up against "
        "the current point's (the SLO's target is a floor, not what memory is bought with)",
    )
    min_saving_gib_h: float = Field(
        default=10.0,
        ge=0,
        le=1e6,
        description="lean: least warm GiB-hours a hop to a leaner point saves over the forecast "
        "windows (the price of a hop, in memory)",
    )
    quiet_headroom: float = Field(
        default=2.5,
        ge=1,
        le=100,
        description="lean: for a plan without a quiet rung's predicted_full (written before), "
        "the rung (a point with for_traffic_share s) is a candidate while the forecast is at "
        "most this x s of the plan's fitted traffic in its hours",
    )
    min_dwell_s: float = Field(
        default=7200.0,
        ge=0,
        le=30 * DAY_S,
        description="least time a point stays in force before the next hop, s",
    )
    hop_horizon_s: float | None = Field(
        default=None,
        ge=60,
        le=30 * DAY_S,
        description="time a hop is judged over (its restarts' waits against its gain), s; "
        "None: the dwell, at least a window",
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
    prior_waits: float = Field(
        default=20.0,
        ge=0,
        le=1e6,
        description="weight, in waits, of the plan's predicted switch P95 in a window's estimate",
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
    reoptimize_lookback_s: float = Field(
        default=DAY_S, ge=60, le=30 * DAY_S, description="traffic a re-optimization plans for, s"
    )
    beyond_peak_factor: float = Field(
        default=1.5,
        ge=1,
        le=1000,
        description="a model's window rate above this multiple of its fitted peak: beyond the plan",
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
    fitted_peak_rps: dict[str, float] = Field(
        default_factory=dict,
        description="per model, the highest window rate a re-optimization was issued on, req/s",
    )
    failed_beyond_plan: list[str] = Field(
        default_factory=list,
        description="points seen missing the SLO on traffic beyond the plan: no longer targets",
    )
    config: AdjustConfig = Field(default_factory=AdjustConfig)


@dataclass(frozen=True)
class HopCost:
    """What moving from one point to another implies (observe.hop_cost: the reconcile diff)."""

    starts: int = 0  # starts and restarts (each a cold start)
    sleeps: int = 0
    stops: int = 0
    wakes: int = 0  # asleep instances woken (moved to the gpu tier)
    # instance id -> s from the hop's start until it serves, for every instance (re)started
    # or woken; apply runs the steps one after another, so these add up
    restarted: dict[str, float] = field(default_factory=dict)
    duration_s: float = 0.0  # until the last step is done, s
    predicted_s: float | None = None  # the plan's `hops` cost_s for this pair, when it has one

    @property
    def tiers_only(self) -> bool:
        """A hop of sleeps and wakes only: no process starts or stops."""
        return self.starts == 0 and self.stops == 0

    def to_json(self) -> dict[str, Any]:
        out = {
            "starts": self.starts,
            "wakes": self.wakes,
            "sleeps": self.sleeps,
            "stops": self.stops,
            "duration_s": round(self.duration_s, 3),
            "tiers_only": self.tiers_only,
        }
        if self.predicted_s is not None:
            out["plan_cost_s"] = self.predicted_s
        return out


@dataclass(frozen=True)
class PointEstimate:
    """A point's simulated figures on a window (or the forecast) as the policy reads them."""

    metrics: PointMetrics
    # its switch P95 shrunk towards the plan's prediction (`observe.switch_estimate`), s
    switch_est_s: float

    @classmethod
    def of(cls, m: PointMetrics) -> PointEstimate:
        """No prediction to shrink towards: the estimate is the simulated switch P95."""
        return cls(m, m.switch_p95_s)


@dataclass(frozen=True)
class Observation:
    """One window as the policy sees it."""

    end_s: float  # end of the window, s (trace time live: epoch s)
    window: pd.DataFrame  # the window's requests (trace schema)
    metrics: dict[str, PointEstimate]  # point name -> its figures on the window
    hop_costs: dict[str, HopCost]  # point name -> cost of hopping there from the current point
    target_attainment: float  # the SLO's attainment target
    drift_plan: Any = None  # DriftReport vs the plan's workload_summary (None: no reference)
    drift_chosen: Any = None  # DriftReport vs the window the current point was chosen on
    # point name -> metrics on the forecast (the next windows as they went a day earlier);
    # empty: no forecast
    forecast: dict[str, PointEstimate] = field(default_factory=dict)
    # forecast requests in each of the next windows (the first: the one a hop lands in)
    forecast_window_requests: tuple[int, ...] = ()
    # What comes next, as forecast (else as the window): per point, each request's switch
    # wait there and the wait a hop there adds (s, arrays in request order); the point's
    # predicted switch P95 (None: the plan predicts nothing); the basis's span (s).
    basis_waits: dict[str, Any] = field(default_factory=dict)
    hop_delays: dict[str, Any] = field(default_factory=dict)
    priors: dict[str, float | None] = field(default_factory=dict)
    basis_span_s: float = 0.0
    forecast_dropped: bool = False  # the day before did not foresee the window: no forecast
    # points the plan itself predicts to miss the SLO on the workload it was optimized for
    # (e.g. a baseline that serves only some models): never a hop's target
    unfit: frozenset[str] = frozenset()
    suggest_command: str = ""  # the `planner optimize ...` line a suggest prints
    # per model, the window's rate (req/s), and the models whose rate is beyond the plan:
    # over `beyond_peak_factor` x the peak it was fitted to (the plan's workload_summary or
    # the last re-optimization's window, whichever is higher)
    window_rate_rps: dict[str, float] = field(default_factory=dict)
    beyond_plan: tuple[str, ...] = ()
    # the traffic forecast after a hop as every point would serve it (hopcost.After: what
    # `hopcost.judge` prices a hop on); None: no simulations to judge on
    after: Any = None
    # the lean decision's forecast and every point on it (policy_lean.LeanView); None: the
    # objective decision, or nothing simulated
    lean: Any = None


@dataclass(frozen=True)
class PointRow:
    """One point in a decision's reasons (`reasons["points"]`), rounded as the journal keeps
    it; the forecast's figures only when the decision looked ahead."""

    slo_attainment: float
    switch_p95_s: float
    ttft_p95_s: float
    warm_gpu_gib: float
    objective_s: float  # J on the window, s
    meets_slo: bool  # within the attainment slack (`policy.meets_slo`)
    hop_cost: dict[str, Any] | None  # `HopCost.to_json()` of a hop there
    forecast_objective_s: float | None = None
    forecast_meets_slo: bool | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "slo_attainment": self.slo_attainment,
            "switch_p95_s": self.switch_p95_s,
            "ttft_p95_s": self.ttft_p95_s,
            "warm_gpu_gib": self.warm_gpu_gib,
            "objective_s": self.objective_s,
            "meets_slo": self.meets_slo,
            "hop_cost": self.hop_cost,
        }
        if self.forecast_objective_s is not None:
            out["forecast_objective_s"] = self.forecast_objective_s
            out["forecast_meets_slo"] = self.forecast_meets_slo
        return out


@dataclass(frozen=True)
class Decision:
    """One thing to do after a window: hold, hop, reoptimize or suggest."""

    kind: Literal["hold", "hop", "reoptimize", "suggest"]
    point: str  # the point in force after the action (the hop's target for a hop)
    reason: str  # one line
    reasons: dict[str, Any] = field(default_factory=dict)  # drift, per-point metrics, thresholds
    from_point: str = ""
    command: str = ""  # suggest: the exact command

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "point": self.point,
            "from": self.from_point,
            "reason": self.reason,
            "command": self.command,
            "reasons": self.reasons,
        }
