"""The kernel layer: one GEMM's time from measurements where they cover its shape.

Which layer answers (`Source`): `measured` where (m, n, k) is a point of the table;
`interpolated` inside the table's grid (log-linear in m, n and k, between the measured
corners), and also just outside it (each dimension within `RESCALE_FACTOR` of the grid's
edge), where the nearest edge point keeps its measured utilization and the time scales as
the roofline does (`roof_s`); `roofline` elsewhere, and on GPUs or formats with no table:
the caller's roofline with its fitted efficiencies (optimizer/perf/calib.py). A generation
with no table borrows the shape dependence of the nearest one's (`borrowed_factor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from planner.catalog.kernel_tables import GemmTable

Source = Literal["measured", "interpolated", "roofline"]
SOURCE_RANK: dict[str, int] = {"measured": 0, "interpolated": 1, "roofline": 2}
RESCALE_FACTOR = 4.0  # how far past the grid's edge a measurement still answers, per dimension
# Blackwell has no table: its GEMMs lose utilization on narrow per-GPU shapes (high TP) as
# Hopper's do; the serving runs show it (Llama-3.1-70B on B200 with the flat efficiency: TTFT
# +21% at TP1, -13% at TP8, bench/perfmodel_vs_serving.py). The level stays the fitted one.
BORROWED_TABLE = {"blackwell": "H200-SXM"}
BORROWED_REF_NK = 8192  # the (m, 8192, 8192) GEMM whose borrowed utilization the level keeps


def worst_source(sources: Sequence[str]) -> Source:
    """The least direct of `sources` (roofline < interpolated < measured); roofline if none."""
    if not sources:
        return "roofline"
    return max(sources, key=SOURCE_RANK.__getitem__)  # type: ignore[return-value]


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
    (i0, i1, wi) = _bracket(t.m, m)
    (j0, j1, wj) = _bracket(t.n, n)
    (l0, l1, wl) = _bracket(t.k, k)
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


def borrowed_factor(
    gpu_arch: str, low_precision: bool, m: float, shapes: Sequence[tuple[int, int, int]]
) -> float:
    """How much slower than at the flat fitted efficiency the GEMMs `shapes` ((n, k, count),
    m tokens each) run on a generation with no table: the FLOP-weighted mean of the borrowed
    table's utilization at (m, BORROWED_REF_NK, BORROWED_REF_NK) over its utilization at
    each shape; 1.0 where nothing is borrowed or the table does not answer a shape."""
    from planner.catalog.gpus import resolve_gpu
    from planner.catalog.kernel_tables import gemm_table

    proxy = BORROWED_TABLE.get(gpu_arch)
    table = gemm_table(proxy, "fp8" if low_precision else "bf16") if proxy else None
    if table is None or not shapes:
        return 1.0
    spec = resolve_gpu(proxy)
    peak = (spec.fp8_tflops if low_precision else spec.bf16_tflops) * 1e12  # FLOP/s

    def util(n: float, k: float) -> float | None:
        got = gemm_s(table, m, n, k, lambda m_, n_, k_: 2.0 * m_ * n_ * k_ / peak)
        return None if got is None else 2.0 * m * n * k / peak / got[0]

    ref = util(BORROWED_REF_NK, BORROWED_REF_NK)
    each = [util(n, k) for n, k, _ in shapes]
    if ref is None or any(u is None for u in each):
        return 1.0
    flops = [2.0 * n * k * count for n, k, count in shapes]
    return sum(f * ref / u for f, u in zip(flops, each, strict=True)) / sum(flops)  # type: ignore[operator]
