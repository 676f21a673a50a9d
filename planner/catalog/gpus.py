"""Built-in GPU catalog: spec-sheet numbers, each row with its source.

Rates are dense (no sparsity). On GeForce cards `bf16_tflops` is the FP32-accumulate tensor
rate (what vLLM's GEMMs get), not the FP16-accumulate headline.
"""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class GpuSpec(BaseModel):
    """One GPU type. Inline specs in cluster.yaml use the same fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="catalog name, e.g. `L40S`")
    arch: Literal["ampere", "ada", "hopper", "blackwell", "cpu"] = Field(description="generation")
    memory_gib: float = Field(gt=0, le=4096, description="device memory, GiB")
    memory_bandwidth_gbps: float = Field(gt=0, le=100000, description="device memory bandwidth, GB/s")
    bf16_tflops: float = Field(gt=0, le=100000, description="dense bf16 tensor rate, TFLOP/s")
    fp16_tflops: float = Field(gt=0, le=100000, description="dense fp16 tensor rate, TFLOP/s")
    fp8_tflops: float | None = Field(
        default=None, gt=0, description="dense fp8 tensor rate, TFLOP/s; None: no fp8 compute"
    )
    int8_tops: float | None = Field(default=None, gt=0, description="dense int8 tensor rate, TOP/s")
    pcie_gen: int = Field(default=4, ge=3, le=6, description="PCIe generation of the host link")
    pcie_gbps: float = Field(
        default=25.0, gt=0, le=1000, description="host<->device bandwidth per direction, GB/s"
    )
    nvlink_gbps: float | None = Field(
        default=None, gt=0, description="GPU<->GPU NVLink bandwidth per direction, GB/s; None: none"
    )
    source: str = Field(default="inline", description="where these numbers come from")


_GPUS: list[GpuSpec] = []  # filled below


def _row(**kw) -> None:
    _GPUS.append(GpuSpec(**kw))


GPUS: dict[str, GpuSpec] = {}


def _index() -> None:
    GPUS.clear()
    GPUS.update({g.name: g for g in _GPUS})


def resolve_gpu(name: str) -> GpuSpec:
    """Catalog lookup by name (case-insensitive); unknown names raise ValueError with a hint."""
    if name in GPUS:
        return GPUS[name]
    lower = {k.lower(): k for k in GPUS}
    if name.lower() in lower:
        return GPUS[lower[name.lower()]]
    close = difflib.get_close_matches(name, list(GPUS), n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ValueError(
        f"{name!r} is not a known GPU type{hint}; see `planner catalog gpus` or give an inline spec"
    )
