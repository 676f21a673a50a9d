"""The explain service (`planner explain PLAN`): why each model of a point got its variant,
GPUs and tier, and the memory each GPU holds over the day."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.optimizer.daymemory import GpuDay
    from planner.optimizer.explain import ModelExplanation
    from planner.schemas.plan import Point


@dataclass(frozen=True)
class Explanation:
    """A point's models, each with what binds and what else would fit, and its GPUs' day."""

    point: Point
    models: list[ModelExplanation]
    gpus: list[GpuDay]

    def to_json(self) -> dict[str, Any]:
        from planner.optimizer.daymemory import idle_sleep_rule

        days = [
            {
                "node": d.node,
                "gpu": d.gpu,
                "peak_gib": d.peak_gib,
                "peak_hours": d.peak_hours,
                "on_demand_gib": d.on_demand_gib,
            }
            for d in self.gpus
        ]
        return {
            "point": self.point.name,
            "models": [asdict(e) for e in self.models],
            "gpus": days,
            "idle_sleep": idle_sleep_rule(self.point),
        }


def explain(
    plan_path: Path,
    point: str | None = None,
    *,
    workload: Path | None = None,
    cluster: Path | None = None,
    models: Path | None = None,
) -> Explanation:
    """Point `point` of the plan (its recorded inputs, a flag overriding one), the demand
    from `workload` (default: the plan's workload summary)."""
    from planner.app.files import workload as read_workload
    from planner.app.inputs import resolve
    from planner.optimizer.daymemory import day_memory
    from planner.optimizer.demand import model_demand
    from planner.optimizer.explain import demand_from_summary
    from planner.optimizer.explain import explain as tell

    r = resolve(plan_path, cluster=cluster, models=models, point=point)
    plan = r.plan
    cl = r.cluster
    ms = r.models
    sl = r.slo
    pt = plan.point(point)
    if workload is not None:
        demand = model_demand(read_workload(workload, ms, int(plan.search.get("seed", 0))))
    else:
        demand = demand_from_summary(plan.workload_summary)
    knobs = plan.search.get("knobs", {}).get(pt.name) or {}
    exps = tell(pt, cl, ms, sl, demand, headroom=float(knobs.get("headroom", 1.0)))
    return Explanation(pt, exps, day_memory(pt))
