"""Planned awake hours (`schedule.awake_hours`): an instance whose wake is slow is kept awake
in every hour its model is forecast any request, a fast one only where the forecast reaches
the threshold."""

from __future__ import annotations

import numpy as np
import pytest
from optimizer_builders import perf, point, step_model

from planner.optimizer.schedule import awake_hours, fast_wake_s

WORK_H = list(range(9, 18))


def _rates() -> np.ndarray:
    r = np.zeros(24)
    r[WORK_H] = 10.0
    r[8], r[18] = 0.3, 0.2  # the edges of the working day: below the threshold, not zero
    return r


def _case():
    p = point(["host", "host", "host"], ["a", "b", "c"], [[0], [1], [2]])
    s = step_model()
    perfs = {
        "i0": perf(s, wake_host_s=0.4, sleep_s=0.3),
        "i1": perf(s, wake_host_s=0.5, sleep_s=0.4),
        "i2": perf(s, wake_host_s=2.0, sleep_s=0.5),
    }
    return p, perfs, {m: _rates() for m in "abc"}


def test_a_slow_wake_keeps_every_hour_with_requests_a_fast_one_the_busy_ones():
    p, perfs, rates = _case()
    fast_s = fast_wake_s(p, perfs, rates, 3.0)
    assert fast_s == pytest.approx((2.0 + 0.4) / 3)  # the slowest wake after the median sleep, / 3
    hours = awake_hours(p, perfs, rates, 0.5, fast_s)
    assert hours["i0"] == hours["i1"] == WORK_H
    assert hours["i2"] == [7, 8, *WORK_H, 18]  # and the hour before those
    # without the bound every instance follows the threshold
    assert all(h == WORK_H for h in awake_hours(p, perfs, rates, 0.5).values())


def test_a_model_never_asked_for_sets_no_bound():
    p, perfs, rates = _case()
    assert fast_wake_s(p, perfs, {}, 3.0) == np.inf
    # c is not in the forecast: the bound comes from a and b alone
    del rates["c"]
    assert fast_wake_s(p, perfs, rates, 3.0) == pytest.approx((0.5 + 0.35) / 3)
