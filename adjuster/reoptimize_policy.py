"""What the adjuster asks of a re-optimizer, when the policy decides `reoptimize` (auto).

`planner.app.reoptimize.Reoptimizer` is the real one (`optimize` again with the plan's
inputs, calibration and config); the adjuster cannot import it (planner.app is the layer
above), so it names the two calls it makes here. The live tick calls `reoptimize` (the
real one writes a new plan file next to the plan); a replay calls `points` and adds them to
its plan (adjuster/replay.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pandas as pd

    from planner.optimizer.perf.types import InstancePerf
    from planner.schemas.plan import Plan, Point

# point name -> instance id -> InstancePerf
PointPerfs = dict[str, dict[str, "InstancePerf"]]


class ReoptimizePolicy(Protocol):
    """Optimize again on the recent traffic (trace schema, sorted by time)."""

    def points(self, recent: pd.DataFrame) -> tuple[list[Point], PointPerfs]:
        """The points optimized on `recent`, and their perfs."""
        ...

    def reoptimize(
        self, recent: pd.DataFrame, now_s: float, plan: Plan
    ) -> tuple[Plan | None, dict[str, Any]]:
        """A tick's re-optimization at `now_s`: the plan to go on with (None: `plan`,
        unchanged) and what to report (JSON values)."""
        ...


__all__ = ["PointPerfs", "ReoptimizePolicy"]
