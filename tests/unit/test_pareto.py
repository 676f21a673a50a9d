"""Pareto front and point naming: properties over random objective vectors."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from planner.optimizer.pareto import name_points, pareto_front

vec = st.tuples(st.floats(0, 100, allow_nan=False), st.floats(0, 100, allow_nan=False))


def dominates(a, b) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(
        x < y for x, y in zip(a, b, strict=True)
    )


@given(st.lists(vec, min_size=1, max_size=40))
def test_front_is_exactly_the_non_dominated_set(items):
    front = pareto_front(items, lambda v: v)
    assert front, "a non-empty set has a non-empty front"
    for f in front:
        assert not any(dominates(o, f) for o in items)
    for it in items:
        assert it in front or any(dominates(f, it) for f in front) or any(f == it for f in front)


@given(st.lists(vec, min_size=1, max_size=40, unique=True))
def test_names_order_by_warm_memory(items):
    front = pareto_front(items, lambda v: v)
    named = name_points(front, warm=lambda v: v[1], switch=lambda v: v[0])
    names = [n for n, _ in named]
    assert len(set(names)) == len(names)
    warms = [v[1] for _, v in named]
    assert warms == sorted(warms, reverse=True), "fast-switch first, lean last"
    if len(named) >= 3:
        assert names[0] == "fast-switch" and names[-1] == "lean" and "balanced" in names
