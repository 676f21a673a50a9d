"""What one search evaluation holds and what a search returns (plan points, metrics, knobs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.optimizer.candidates import Knobs
from planner.optimizer.capacity import CapacityReport
from planner.optimizer.milp import MilpResult
from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.point_metrics import PointMetrics
from planner.schemas.plan import Hop, Point, Predicted


@dataclass
class Evaluation:
    """One knob setting, its MILP outcome and the simulator's metrics."""

    index: int
    knobs: Knobs
    milp: MilpResult | None
    point: Point | None
    perfs: dict[str, InstancePerf]
    metrics: PointMetrics | None  # on the days the search fits to
    milp_s: float = 0.0  # wall time of candidate generation + solve, s
    sim_s: float = 0.0  # wall time of the simulator, s
    held: PointMetrics | None = None  # on the held-back days (None: none held back)
    origin: str = "milp"  # milp | tiers (a tier variant) | from-<baseline>

    @property
    def feasible(self) -> bool:
        """The MILP found a placement and the simulator scored it."""
        return self.metrics is not None

    @property
    def chosen(self) -> PointMetrics:
        """The metrics points are chosen on: held-back days if any, else the fitted ones."""
        assert self.metrics is not None
        return self.held if self.held is not None else self.metrics


@dataclass
class SearchResult:
    """All evaluations, the chosen points and where time went."""

    evaluations: list[Evaluation]
    points: list[Point]
    selected: str
    notes: list[str] = field(default_factory=list)
    milp_time_s: float = 0.0
    sim_time_s: float = 0.0
    milp_max_s: float = 0.0
    knobs: dict[str, Knobs] = field(default_factory=dict)  # point name -> the knobs that made it
    metrics: dict[str, PointMetrics] = field(default_factory=dict)  # point name -> chosen on
    metrics_fit: dict[str, PointMetrics] = field(default_factory=dict)  # on the fitted days
    # same days as `metrics`; a baseline that could not be built: why (a string)
    baselines: dict[str, PointMetrics | str] = field(default_factory=dict)
    twins: dict[str, PointMetrics] = field(default_factory=dict)  # point -> its lru@ twin's
    capacity: CapacityReport | None = None
    hops: dict[str, dict[str, Hop]] = field(default_factory=dict)
    perfs: dict[str, dict[str, InstancePerf]] = field(default_factory=dict)  # point -> perfs
    validate_days: int = 0
    fit_requests: int = 0
    held_requests: int = 0
    held_days: list[tuple[int, int]] = field(default_factory=list)  # (day from 0, requests)


def knobs_to_dict(k: Knobs) -> dict[str, Any]:
    """Knobs as plain data (plan.yaml `search.knobs`)."""
    return {
        "headroom": round(k.headroom, 6),
        "kv_factor": round(k.kv_factor, 6),
        "max_num_seqs": k.max_num_seqs,
        "w_switch": round(k.w_switch, 6),
        "w_memory": round(k.w_memory, 6),
        "w_quality": k.w_quality,
        "w_gpus": k.w_gpus,
        "may_sleep": sorted(k.may_sleep),
    }


def predicted(m: PointMetrics) -> Predicted:
    """Rounded metrics as the plan records them."""
    return Predicted(
        switch_p95_s=round(float(m.switch_p95_s), 4),
        ttft_p95_s=round(float(m.ttft_p95_s), 4),
        tpot_p95_s=round(float(m.tpot_p95_s), 5),
        slo_attainment=round(float(m.slo_attainment), 5),
        warm_gpu_gib=round(float(m.warm_gpu_gib), 3),
        gpus_used=int(m.gpus_used),
        quality_cost=round(float(m.quality_cost), 5),
    )
