"""Session hand-offs of the fitted days (`schedule.handoffs`) and the schedule variant that
carries them (`schedule.scheduled`)."""

from __future__ import annotations

import pandas as pd

from planner.optimizer.schedule import handoffs


def _trace(rows):
    return pd.DataFrame(rows, columns=["timestamp", "model", "user", "session"])


def test_handoffs_count_the_next_model_of_each_session():
    # u1/s1: a b a b a c; u2/s1: a a b (its own session: u2's a does not follow u1's b)
    rows = [
        (0, "a", "u1", "s1"),
        (10, "b", "u1", "s1"),
        (20, "a", "u1", "s1"),
        (30, "b", "u1", "s1"),
        (40, "a", "u1", "s1"),
        (50, "c", "u1", "s1"),
        (5, "a", "u2", "s1"),
        (15, "a", "u2", "s1"),
        (25, "b", "u2", "s1"),
    ]
    # after a (5 times): b 3, a 1, c 1; after b (2 times): a 2
    assert handoffs(_trace(rows), 0.25) == {"a": ["b"], "b": ["a"]}
    assert handoffs(_trace(rows), 0.2) == {"a": ["b", "c"], "b": ["a"]}
    assert handoffs(_trace(rows), 0.7) == {"b": ["a"]}


def test_requests_without_a_session_are_not_counted():
    rows = [(0, "a", "u1", ""), (10, "b", "u1", ""), (20, "a", "u1", "s"), (30, "c", "u1", "s")]
    assert handoffs(_trace(rows), 0.1) == {"a": ["c"]}


def test_order_is_by_time_not_by_row():
    rows = [(30, "c", "u1", "s"), (0, "a", "u1", "s"), (10, "b", "u1", "s")]
    assert handoffs(_trace(rows), 0.1) == {"a": ["b"], "b": ["c"]}
