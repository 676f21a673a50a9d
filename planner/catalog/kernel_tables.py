"""Measured GEMM times shipped with the package (`planner/catalog/kernels.json`).

aiconfigurator's vLLM 0.14 GEMM tables (github.com/ai-dynamo/aiconfigurator, Apache-2.0) of
A100-SXM, H100-SXM, H200-SXM and L40S, converted by scripts/kernel_tables.py: one latency per
(m tokens, n out, k in) of a grid, per GEMM kind (bf16; fp8 per-tensor; fp8_block, the
block-scaled fp8 of MoE checkpoints). Read once, on the first lookup.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class GemmTable:
    """Measured times of one GEMM kind on one GPU: `log_us[i, j, l]` is log(µs) of m[i]
    tokens x k[l] in by k[l] x n[j] out; NaN where that shape was not measured."""

    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    log_us: np.ndarray

    @staticmethod
    def from_lists(
        m: list[int], n: list[int], k: list[int], us: list[list[list[float | None]]]
    ) -> GemmTable:
        arr = np.array(us, dtype=float)  # None (not measured) becomes NaN
        return GemmTable(tuple(m), tuple(n), tuple(k), np.log(arr))


@lru_cache(maxsize=1)
def _doc() -> dict[str, Any]:
    text = resources.files("planner.catalog").joinpath("kernels.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    return doc


@lru_cache(maxsize=64)
def gemm_table(gpu_name: str, kind: str) -> GemmTable | None:
    """The measured table of `kind` GEMMs on the catalog GPU `gpu_name`; None: not measured."""
    t = _doc()["gpus"].get(gpu_name, {}).get(kind)
    if t is None:
        return None
    return GemmTable.from_lists(t["m"], t["n"], t["k"], t["us"])
