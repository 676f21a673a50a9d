"""The lean decision when the traffic outgrows the plan (issue 41, bench/adjust_replay.py's
real-shape week: busy days at 3-12x the planning day's coder traffic). The forecast is drawn
from calmer hours, so it can say a point meets the targets in the very hour the window saw
every point miss the SLO: the window is the witness there, and a point that missed the SLO
on traffic beyond the plan is no target again (policy.py rule 2, as the objective rule
reads it). Before, the lean rule held at the point in force and never re-optimized: the
week's adjusted attainment stayed at the day-0 points' 0.942."""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.adjuster.forecast import Forecast
from planner.adjuster.policy import AdjustConfig, AdjustState, decide
from planner.adjuster.policy_lean import LeanRow, LeanView
from planner.adjuster.policy_types import Observation, PointEstimate
from planner.optimizer.point_metrics import PointMetrics

T = 33 * 3600.0  # 09:00 of day 1, the first busy morning


def _obs(
    forecast_att: dict[str, float],
    window_att: dict[str, float],
    beyond: tuple = (),
    quiet: dict[str, float] | None = None,
):
    """A window of 500 requests at `window_att` per point, a forecast at `forecast_att` (each
    point meets the targets there; 1.5x the plan's fitted traffic), the points of the
    placement in force (no restarts) but `new` (4 restarts), `beyond`: the models whose rate
    is beyond the plan, `quiet`: quiet rung -> its for_traffic_share."""
    rows = {
        p: LeanRow(a, 500, 60.0 if p == "lean" else 100.0, {}, (), 0, True)
        for p, a in forecast_att.items()
    }
    metrics = {
        p: PointEstimate.of(
            PointMetrics(
                slo_attainment=a,
                ttft_p95_s=1.0,
                tpot_p95_s=0.05,
                switch_p95_s=0.5,
                switch_count=10,
                warm_gpu_gib=rows[p].warm_gib,
                gpus_used=2,
                requests=500,
            )
        )
        for p, a in window_att.items()
    }
    fc = Forecast(T, 3600.0, {"coder": np.full(3, 150.0)}, {"coder": 1.0}, 1, np.full(3, 100.0))
    return Observation(
        end_s=T,
        window=pd.DataFrame(
            {
                "timestamp": np.linspace(T - 3600.0, T - 1.0, 500),
                "model": "coder",
                "input_tokens": 500,
                "output_tokens": 50,
                "user": "u",
                "session": [f"s{k}" for k in range(500)],
                "cached_tokens": 0,
            }
        ),
        metrics=metrics,
        hop_costs={},
        target_attainment=0.95,
        window_rate_rps={"coder": 500 / 3600.0},
        beyond_plan=beyond,
        lean=LeanView(fc, rows, quiet or {}, {"new": 4} if "new" in rows else {}),
    )


AUTO = AdjustConfig(reoptimize="auto")


def test_every_point_missing_on_a_window_beyond_the_plan_reoptimizes():
    """The forecast says both points meet the targets; the window (500 requests) saw both at
    0.85: re-optimize at once (the load beyond the plan is the second witness), and both are
    remembered as lacking the capacity. Before: a hold, `full` "the leanest point that meets
    the targets on the forecast"."""
    st = AdjustState(point="full", since_s=0.0, config=AUTO)
    miss = {"full": 0.85, "lean": 0.85}
    new, acts = decide(st, _obs({"full": 0.99, "lean": 0.99}, miss, ("coder",)))
    assert acts[0].kind == "reoptimize", acts[0].reason
    assert "beyond the plan's peak for coder" in acts[0].reason
    assert new.failed_beyond_plan == ["full", "lean"]
    # within the plan's peak, one such window is noise: confirmed by a second one
    new, acts = decide(st, _obs({"full": 0.99, "lean": 0.99}, miss))
    assert acts[0].kind == "hold" and "1 of 2 windows" in acts[0].reason
    _, acts = decide(new, _obs({"full": 0.99, "lean": 0.99}, miss))
    assert acts[0].kind == "reoptimize"


def test_points_that_failed_beyond_the_plan_are_left_for_the_re_optimized_ones():
    """After the re-optimization, in a window every point passes, the forecast ranks the
    day-0 ladder (`full`, `lean`: the same placement, no restart) above `new` (4 restarts,
    its forecast attainment lower with the hop's waits): the lean rule leaves for `new`
    anyway, as the day-0 points lack the capacity the busy hours need. Before: a saving
    towards `lean`, and `new` never in force."""
    st = AdjustState(point="full", since_s=0.0, config=AUTO, failed_beyond_plan=["full", "lean"])
    fc = {"full": 0.99, "lean": 0.99, "new": 0.98}
    _, acts = decide(st, _obs(fc, {"full": 0.99, "lean": 0.99, "new": 0.99}))
    assert acts[0].kind == "hop" and acts[0].point == "new", acts[0].reason
    assert acts[0].reason == "full missed the SLO on traffic beyond the plan; new meets them"


def test_a_quiet_rung_that_nothing_can_replace_reoptimizes_too():
    """The quiet rung in force, traffic back above its share, and no point meeting the SLO on
    a window beyond the plan: re-optimize, as from any other point. Before: a hold, "but no
    other point meets the targets on the forecast", in every busy hour of the week."""
    st = AdjustState(point="quiet", since_s=0.0, config=AUTO)
    obs = _obs(
        {"full": 0.99, "quiet": 0.99}, {"full": 0.8, "quiet": 0.8}, ("coder",), {"quiet": 0.25}
    )
    _, acts = decide(st, obs)
    assert acts[0].kind == "reoptimize", acts[0].reason


def test_points_that_failed_beyond_the_plan_stay_targets_while_no_other_meets():
    """Where every point was seen failing beyond the plan (no re-optimization yet, or
    `--reoptimize suggest`), a window they all pass is judged as before: no re-optimization
    or suggestion every dwell, and the saving to `lean` is counted as usual."""
    st = AdjustState(point="full", since_s=0.0, config=AUTO, failed_beyond_plan=["full", "lean"])
    ok = {"full": 0.99, "lean": 0.99}
    new, acts = decide(st, _obs(ok, ok))
    assert acts[0].kind == "hold" and new.candidate == "lean", acts[0].reason
