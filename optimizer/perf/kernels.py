"""The kernel layer: one GEMM's time from measurements where they cover its shape.

Which layer answers (`Source`): `measured` where (m, n, k) is a point of the table;
`interpolated` inside the table's grid (log-linear in m, n and k, between the measured
corners), and also just outside it (each dimension within `RESCALE_FACTOR` of the grid's
edge), where the nearest edge point keeps its measured utilization and the time scales as
the roofline does (`roof_s`); `roofline` elsewhere, and on GPUs or formats with no table:
the caller's roofline with its fitted efficiencies (optimizer/perf/calib.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Source = Literal["measured", "interpolated", "roofline"]
SOURCE_RANK: dict[str, int] = {"measured": 0, "interpolated": 1, "roofline": 2}
RESCALE_FACTOR = 4.0  # how far past the grid's edge a measurement still answers, per dimension


def worst_source(sources: Sequence[str]) -> Source:
    """The least direct of `sources` (roofline < interpolated < measured); roofline if none."""
    if not sources:
        return "roofline"
    return max(sources, key=SOURCE_RANK.__getitem__)  # type: ignore[return-value]


@dataclass(frozen=True, eq=False)
class GemmTable:
    """Measured times of one GEMM kind on one GPU: `log_us[i, j, l]` is log(µs) of m[i]
    tokens x k[l] in by k[l] x n[j] out; NaN where that shape was not measured."""

    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    log_us: np.ndarray

    @staticmethod
    def from_lists(m: list, n: list, k: list, us: list) -> GemmTable:
        arr = np.array(us, dtype=float)  # None (not measured) becomes NaN
        return GemmTable(tuple(m), tuple(n), tuple(k), np.log(arr))


def _bracket(grid: tuple[int, ...], x: float) -> tuple[int, int, float]:
    """(lower index, upper index, weight of the upper) of `x` inside `grid`, in log space."""
    hi = int(np.searchsorted(grid, x))
    if hi < len(grid) and grid[hi] == x:
        return hi, hi, 0.0
    lo = hi - 1
    w = math.log(x / grid[lo]) / math.log(grid[hi] / grid[lo])
    return lo, hi, w


def _inside_s(t: GemmTable, m: float, n: float, k: float) -> tuple[float, bool] | None:
    """(s, exact) of a shape inside the grid, interpolated between its measured corners;
    None where a corner was not measured."""
    (i0, i1, wi), (j0, j1, wj), (l0, l1, wl) = (
        _bracket(t.m, m), _bracket(t.n, n), _bracket(t.k, k),
    )  # fmt: skip
    total = 0.0
    for i, a in ((i0, 1 - wi), (i1, wi)):
        for j, b in ((j0, 1 - wj), (j1, wj)):
            for l_, c in ((l0, 1 - wl), (l1, wl)):
                if a * b * c == 0.0:
                    continue
                v = t.log_us[i, j, l_]
                if math.isnan(v):
                    return None
                total += a * b * c * v
    exact = i0 == i1 and j0 == j1 and l0 == l1
    return math.exp(total) * 1e-6, exact


def gemm_s(
    table: GemmTable | None, m: float, n: float, k: float, roof_s: Callable[..., float]
) -> tuple[float, Source] | None:
    """(s, source) of one GEMM of m tokens, k in, n out from `table`; None where the table
    does not answer (the caller's roofline does). `roof_s(m, n, k)`: the roofline time of a
    shape at unit efficiency, for rescaling from the grid's edge."""
    if table is None:
        return None
    grids = (table.m, table.n, table.k)
    x = (float(m), float(n), float(k))
    edge = tuple(min(max(v, g[0]), g[-1]) for v, g in zip(x, grids, strict=True))
    if any(max(v / e, e / v) > RESCALE_FACTOR for v, e in zip(x, edge, strict=True)):
        return None
    got = _inside_s(table, *edge)
    if got is None:
        return None
    s, exact = got
    if edge != x:
        return s * roof_s(*x) / roof_s(*edge), "interpolated"
    return s, "measured" if exact else "interpolated"
