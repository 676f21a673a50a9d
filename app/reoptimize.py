"""Re-optimization as an object the adjuster is given: the plan's inputs and calibration,
its seed, an evaluation budget; the replay asks it for points, the live tick for a plan
file written next to the plan (`plans.plan_from_result`, as `optimize` writes it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.app.inputs import PlanInputs


class Reoptimizer:
    """`optimize` again on recent traffic, with the plan's inputs, calibration and seed."""

    def __init__(self, inp: PlanInputs, evals: int, *, window_file: Path | None = None) -> None:
        self.inp = inp
        self.evals = evals
        stem = inp.plan_path.name.removesuffix(".yaml").removesuffix(".plan")
        self.new_plan = inp.plan_path.with_name(f"{stem}.reoptimized.plan.yaml")
        self.window_file = window_file

    def optimize(self, trace: Any) -> tuple[Any, Any]:
        """(OptimizeConfig, result) of a search on `trace`."""
        from planner.optimizer.config import OptimizeConfig
        from planner.optimizer.scoring import scorer
        from planner.optimizer.search import optimize

        inp = self.inp
        cfg = OptimizeConfig(evals=self.evals, seed=inp.seed())
        res = optimize(
            inp.cluster, inp.models, inp.slo, trace, cfg, scorer(trace, inp.slo), inp.calib or None
        )
        return cfg, res

    def __call__(self, window: Any) -> tuple[list[Any], dict[str, dict[str, Any]]]:
        """The replay's re-optimization: the new points and their perfs (calibrated)."""
        _, res = self.optimize(window)
        return res.points, {p.name: self.inp.perfs(p) for p in res.points}

    def write(self, trace: Any, out: Path, workload_file: Path) -> Path:
        """Optimize on `trace` and write the plan to `out` atomically."""
        from planner.app.inputs import calibration_refs
        from planner.app.plans import plan_from_result, provenance
        from planner.planfile import write_plan

        inp = self.inp
        cfg, res = self.optimize(trace)
        refs = provenance(
            base=out.parent, cluster=inp.cluster_path, models=inp.models_path,
            slo=inp.slo_path, workload=workload_file, profiles=inp.profiles_path,
        )  # fmt: skip
        plan = plan_from_result(
            res, cfg, inputs=refs, trace=trace, seed=inp.seed(),
            search={"reoptimized_from": str(inp.plan_path)},
            calibration=calibration_refs(inp.profiles_path),
        )  # fmt: skip
        write_plan(out, plan, inp.cluster)
        return out

    def live(self, recent: Any, now_s: float, plan: Any) -> tuple[None, dict[str, Any]]:
        """The live tick's re-optimization: the window and the new plan, next to the plan."""
        from planner.trace_write import write_trace

        assert self.window_file is not None, "the live tick gives a window file"
        write_trace(recent, self.window_file)
        self.write(recent, self.new_plan, self.window_file)
        return None, {"new_plan": str(self.new_plan)}


__all__ = ["Reoptimizer"]
