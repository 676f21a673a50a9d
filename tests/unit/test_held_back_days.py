"""Held-back days: which ones (`scoring.held_back_days`) and the fitted days' rates without
them.

The fitted days' per-hour forecast and demand rates are over the fitted days only: a
held-back day taken out of the middle of the week does not dilute them (before, the rates
were divided by the calendar days the fitted trace spans, a day too many)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from planner.optimizer import scoring
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.search_context import search_context
from planner.schemas import load_cluster, load_models, load_slo

SMALL = Path(__file__).resolve().parents[2] / "tests" / "data" / "small"


def _week() -> pd.DataFrame:
    """7 days, 24 requests an hour for planner-7b; day 3 twice as busy."""
    rows = []
    for day in range(7):
        per_h = 48 if day == 3 else 24
        for h in range(24):
            for k in range(per_h):
                t = day * 86400.0 + h * 3600.0 + k * 3600.0 / per_h
                rows.append((t, "planner-7b", 200, 50, f"s{day}-{h}-{k}"))
    df = pd.DataFrame(
        rows, columns=["timestamp", "model", "input_tokens", "output_tokens", "session"]
    )
    return df.assign(user="u", cached_tokens=0)


def test_fit_extent_leaves_out_held_days_inside():
    tr = _week()
    assert scoring.fit_extent(tr, [5, 6]) == (5, scoring.fit_extent(tr, [5, 6])[1])
    days, hours = scoring.fit_extent(tr, [3, 6])
    assert days == 5
    assert hours == np.float64((tr["timestamp"][tr["timestamp"] < 6 * 86400].max()) / 3600 - 24)


def test_rates_over_the_fitted_days_only():
    tr = _week()
    cfg = OptimizeConfig(held_back="spread", validate_days=2)
    S = search_context(
        load_cluster(SMALL / "cluster.yaml"),
        load_models(SMALL / "models.yaml"),
        load_slo(SMALL / "slo.yaml"),
        tr,
        cfg,
        None,
        hold_back=True,
    )
    held = [d for d, _ in S.held_days]
    assert len(held) == 2 and any(0 < d < 6 for d in held)  # one inside the fitted span
    per_h = len(S.fit) / (5 * 24)  # requests in an hour of a fitted day (same every hour)
    assert np.allclose(S.rates["planner-7b"], per_h)
    d = S.demand["planner-7b"]
    assert d.switch_ins_per_hour >= d.switch_ins / (5 * 24)


def test_week_rule_holds_back_one_day_of_each_kind():
    """`week`: the last day, then the last day of the other kind (busy: at least the median
    day's requests): a Monday week's Sunday and Friday, not its weekend alone."""
    counts = [9, 8, 7, 9, 8, 1, 2]  # Monday .. Sunday
    week = pd.DataFrame(
        {"timestamp": [d * 86400.0 + s for d, n in enumerate(counts) for s in range(n)]}
    ).assign(model="a")
    assert scoring.held_back_days(week, 2, "week") == [4, 6]
    assert scoring.held_back_days(week, 3, "week") == [4, 5, 6]
    assert scoring.held_back_days(week, 1, "week") == [6]
    # a week that ends on a working day: that day and the last quiet one
    assert scoring.held_back_days(week.iloc[: sum(counts[:5])], 2, "week") == [2, 4]
