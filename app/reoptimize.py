"""Re-optimization as an object the adjuster is given: the plan's inputs and calibration and
the OptimizeConfig the plan records (`plans.config_from_plan`: seed, held-back days, quality
weight, solver limits ...), with the policy's evaluation budget; the replay asks it for
points, the live tick and the nightly re-plan for a plan file. Every search goes through the
one optimize pipeline (`plans.optimize_plan`), as `planner optimize` does. It is the
adjuster's ReoptimizePolicy (adjuster/reoptimize_policy.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.app.inputs import PlanInputs

if TYPE_CHECKING:
    import pandas as pd

    from planner.adjuster.reoptimize_policy import PointPerfs
    from planner.optimizer.config import OptimizeConfig
    from planner.optimizer.evaluation import SearchResult
    from planner.schemas.plan import Plan, Point


class Reoptimizer:
    """`optimize` again on recent traffic, with the plan's inputs, calibration and config."""

    def __init__(
        self, inp: PlanInputs, evals: int | None, *, window_file: Path | None = None
    ) -> None:
        self.inp = inp
        self.evals = evals  # None: the plan's own
        stem = inp.plan_path.name.removesuffix(".yaml").removesuffix(".plan")
        self.new_plan = inp.plan_path.with_name(f"{stem}.reoptimized.plan.yaml")
        self.window_file = window_file

    def config(self) -> OptimizeConfig:
        """The plan's OptimizeConfig, with this re-optimization's evaluations."""
        from planner.app.plans import config_from_plan

        over = {"evals": self.evals} if self.evals is not None else {}
        return config_from_plan(self.inp.plan, **over)

    def plan(
        self, trace: pd.DataFrame, out: Path | None, workload_file: Path | None
    ) -> tuple[Plan, SearchResult]:
        """(Plan, SearchResult) of the pipeline on `trace` (`out`: where it will be written)."""
        from planner.app.plans import OptimizeInputs, optimize_plan

        inp = self.inp
        paths = dict(
            cluster=inp.cluster_path,
            models=inp.models_path,
            slo=inp.slo_path,
            workload=workload_file,
            profiles=inp.profiles_path,
        )
        src = OptimizeInputs(inp.cluster, inp.models, inp.needed_slo(), trace, inp.calib, paths)
        search = {"reoptimized_from": str(inp.plan_path)}
        return optimize_plan(src, self.config(), out=out, search=search)

    def points(self, recent: pd.DataFrame) -> tuple[list[Point], PointPerfs]:
        """The replay's re-optimization: the new points and their perfs (calibrated)."""
        plan, _ = self.plan(recent, None, None)
        return plan.points, {p.name: self.inp.perfs(p) for p in plan.points}

    def write(self, trace: pd.DataFrame, out: Path, workload_file: Path) -> Path:
        """Optimize on `trace` and write the plan to `out` atomically."""
        from planner.planfile import write_plan

        plan, _ = self.plan(trace, out, workload_file)
        write_plan(out, plan, self.inp.cluster)
        return out

    def reoptimize(
        self, recent: pd.DataFrame, now_s: float, plan: Plan
    ) -> tuple[None, dict[str, Any]]:
        """The live tick's re-optimization: the window and the new plan, next to the plan."""
        from planner.trace.write import write_trace

        assert self.window_file is not None, "the live tick gives a window file"
        write_trace(recent, self.window_file)
        self.write(recent, self.new_plan, self.window_file)
        return None, {"new_plan": str(self.new_plan)}


__all__ = ["Reoptimizer"]
