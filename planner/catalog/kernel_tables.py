"""Measured GEMM times shipped with the package (`planner/catalog/kernels.json`).

aiconfigurator's vLLM 0.14 GEMM tables (github.com/ai-dynamo/aiconfigurator, Apache-2.0) of
A100-SXM, H100-SXM, H200-SXM and L40S, converted by scripts/kernel_tables.py: one latency per
(m tokens, n out, k in) of a grid, per GEMM kind (bf16; fp8 per-tensor; fp8_block, the
block-scaled fp8 of MoE checkpoints). Read once, on the first lookup.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from planner.optimizer.perf.kernels import GemmTable


@lru_cache(maxsize=1)
def _doc() -> dict:
    return json.loads(resources.files("planner.catalog").joinpath("kernels.json").read_text())


@lru_cache(maxsize=64)
def gemm_table(gpu_name: str, kind: str) -> GemmTable | None:
    """The measured table of `kind` GEMMs on the catalog GPU `gpu_name`; None: not measured."""
    t = _doc()["gpus"].get(gpu_name, {}).get(kind)
    if t is None:
        return None
    return GemmTable.from_lists(t["m"], t["n"], t["k"], t["us"])
