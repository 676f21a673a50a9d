"""Non-dominated sets and point names."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from planner.optimizer.point_metrics import PointMetrics

T = TypeVar("T")


def pareto_front(items: Sequence[T], objectives: Callable[[T], tuple[float, ...]]) -> list[T]:
    """Items no other item dominates (all objectives minimized); first of exact ties kept."""
    vals = [objectives(it) for it in items]
    out: list[T] = []
    seen: set[tuple[float, ...]] = set()
    for i, vi in enumerate(vals):
        key = tuple(vi)
        if key in seen:
            continue
        dominated = any(
            all(a <= b for a, b in zip(vj, vi, strict=True))
            and any(a < b for a, b in zip(vj, vi, strict=True))
            for j, vj in enumerate(vals)
            if j != i
        )
        if not dominated:
            out.append(items[i])
            seen.add(key)
    return out


def dominates(a: PointMetrics, b: PointMetrics) -> bool:
    """Metrics `a` dominate `b`: attainment no lower, switch P95 and warm GiB no higher, and
    one of the three strictly better."""
    no_worse = (
        a.slo_attainment >= b.slo_attainment
        and a.switch_p95_s <= b.switch_p95_s
        and a.warm_gpu_gib <= b.warm_gpu_gib
    )
    better = (
        a.slo_attainment > b.slo_attainment
        or a.switch_p95_s < b.switch_p95_s
        or a.warm_gpu_gib < b.warm_gpu_gib
    )
    return no_worse and better


def name_points(
    front: Sequence[T],
    warm: Callable[[T], float],
    switch: Callable[[T], float],
    max_points: int = 6,
) -> list[tuple[str, T]]:
    """Names by warm memory: most warm `fast-switch`, least `lean`, the knee `balanced`.

    With more than `max_points`, points are thinned evenly along warm memory.
    """
    items = sorted(front, key=lambda e: (-warm(e), switch(e)))
    if len(items) > max_points:
        idx = sorted({round(k * (len(items) - 1) / (max_points - 1)) for k in range(max_points)})
        items = [items[i] for i in idx]
    if len(items) == 1:
        return [("balanced", items[0])]
    if len(items) == 2:
        return [("fast-switch", items[0]), ("lean", items[1])]
    # knee: the inner point closest to the utopia corner after normalizing both axes
    w = [warm(e) for e in items]
    s = [switch(e) for e in items]
    wr = (max(w) - min(w)) or 1.0
    sr = (max(s) - min(s)) or 1.0
    inner = range(1, len(items) - 1)
    knee = min(inner, key=lambda i: ((w[i] - min(w)) / wr) ** 2 + ((s[i] - min(s)) / sr) ** 2)
    out = []
    mid = 0
    for i, e in enumerate(items):
        if i == 0:
            out.append(("fast-switch", e))
        elif i == len(items) - 1:
            out.append(("lean", e))
        elif i == knee:
            out.append(("balanced", e))
        else:
            mid += 1
            out.append((f"mid-{mid}", e))
    return out
