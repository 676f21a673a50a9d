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
    memory_bandwidth_gbps: float = Field(
        gt=0, le=100000, description="device memory bandwidth, GB/s"
    )
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
    close = difflib.get_close_matches(name, list(GPUS), n=3, cutoff=0.5)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    raise ValueError(
        f"{name!r} is not a known GPU type{hint}; see `planner catalog gpus` or give an inline spec"
    )


# memory_gib is what the driver reports as total (nvidia-smi MiB / 1024): what vLLM sees.
# pcie_gbps / nvlink_gbps are theoretical per-direction link rates; the perf model applies
# its own efficiency factors. aiconfigurator = ai-dynamo/aiconfigurator systems/*.yaml.
_AIC = "aiconfigurator systems/{}.yaml"

_row(
    name="RTX-3090",
    arch="ampere",
    memory_gib=24.0,
    memory_bandwidth_gbps=936,
    bf16_tflops=71.0,
    fp16_tflops=71.0,
    int8_tops=284.0,
    pcie_gen=4,
    pcie_gbps=32.0,
    nvlink_gbps=56.25,  # 3-slot NVLink bridge, 112.5 GB/s both directions
    source="NVIDIA Ampere GA102 GPU Architecture whitepaper (RTX 3090 column, FP32-accumulate rate)",
)
_row(
    name="RTX-4090",
    arch="ada",
    memory_gib=23.99,
    memory_bandwidth_gbps=1008,
    bf16_tflops=165.2,
    fp16_tflops=165.2,
    fp8_tflops=330.3,
    int8_tops=660.6,
    pcie_gen=4,
    pcie_gbps=32.0,
    source="NVIDIA Ada GPU Architecture whitepaper v2.1 (RTX 4090 column, FP32-accumulate rate)",
)
_row(
    name="A10",
    arch="ampere",
    memory_gib=22.49,
    memory_bandwidth_gbps=600,
    bf16_tflops=125.0,
    fp16_tflops=125.0,
    int8_tops=250.0,
    pcie_gen=4,
    pcie_gbps=32.0,
    source="NVIDIA A10 Tensor Core GPU datasheet",
)
_row(
    name="A10G",
    arch="ampere",
    memory_gib=22.49,
    memory_bandwidth_gbps=600,
    bf16_tflops=70.0,
    fp16_tflops=70.0,
    int8_tops=140.0,
    pcie_gen=4,
    pcie_gbps=32.0,
    source="AWS EC2 G5 instance documentation (A10G, lower clocks than A10)",
)
_row(
    name="L4",
    arch="ada",
    memory_gib=22.49,
    memory_bandwidth_gbps=300,
    bf16_tflops=121.0,
    fp16_tflops=121.0,
    fp8_tflops=242.0,
    int8_tops=242.0,
    pcie_gen=4,
    pcie_gbps=32.0,
    source="NVIDIA L4 Tensor Core GPU datasheet; " + _AIC.format("l4"),
)
_row(
    name="L40S",
    arch="ada",
    memory_gib=44.99,
    memory_bandwidth_gbps=864,
    bf16_tflops=362.05,
    fp16_tflops=362.05,
    fp8_tflops=733.0,
    int8_tops=733.0,
    pcie_gen=4,
    pcie_gbps=32.0,
    source="NVIDIA L40S GPU datasheet; " + _AIC.format("l40s"),
)
_row(
    name="A40",
    arch="ampere",
    memory_gib=44.99,
    memory_bandwidth_gbps=696,
    bf16_tflops=149.7,
    fp16_tflops=149.7,
    int8_tops=299.3,
    pcie_gen=4,
    pcie_gbps=32.0,
    nvlink_gbps=56.25,  # 2-way NVLink bridge, 112.5 GB/s both directions
    source="NVIDIA A40 GPU datasheet",
)
_row(
    name="A100-40GB",
    arch="ampere",
    memory_gib=40.0,
    memory_bandwidth_gbps=1555,
    bf16_tflops=312.0,
    fp16_tflops=312.0,
    int8_tops=624.0,
    pcie_gen=4,
    pcie_gbps=32.0,
    nvlink_gbps=300.0,  # SXM4 NVLink 3, 600 GB/s both directions
    source="NVIDIA A100 Tensor Core GPU datasheet (40GB SXM4)",
)
_row(
    name="A100-80GB-PCIe",
    arch="ampere",
    memory_gib=80.0,
    memory_bandwidth_gbps=1935,
    bf16_tflops=312.0,
    fp16_tflops=312.0,
    int8_tops=624.0,
    pcie_gen=4,
    pcie_gbps=32.0,
    nvlink_gbps=300.0,  # 2-GPU NVLink bridge, 600 GB/s both directions
    source="NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe); " + _AIC.format("a100_pcie"),
)
_row(
    name="A100-80GB-SXM",
    arch="ampere",
    memory_gib=80.0,
    memory_bandwidth_gbps=2039,
    bf16_tflops=312.0,
    fp16_tflops=312.0,
    int8_tops=624.0,
    pcie_gen=4,
    pcie_gbps=32.0,
    nvlink_gbps=300.0,
    source="NVIDIA A100 Tensor Core GPU datasheet (80GB SXM4); " + _AIC.format("a100_sxm"),
)
_row(
    name="H100-PCIe",
    arch="hopper",
    memory_gib=79.65,
    memory_bandwidth_gbps=2000,
    bf16_tflops=756.5,
    fp16_tflops=756.5,
    fp8_tflops=1513.0,
    int8_tops=1513.0,
    pcie_gen=5,
    pcie_gbps=64.0,
    nvlink_gbps=300.0,  # NVLink bridge, 600 GB/s both directions
    source="NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe); " + _AIC.format("h100_pcie"),
)
_row(
    name="H100-SXM",
    arch="hopper",
    memory_gib=79.65,
    memory_bandwidth_gbps=3350,
    bf16_tflops=989.0,
    fp16_tflops=989.0,
    fp8_tflops=1979.0,
    int8_tops=1979.0,
    pcie_gen=5,
    pcie_gbps=64.0,
    nvlink_gbps=450.0,  # NVLink 4, 900 GB/s both directions
    source="NVIDIA H100 Tensor Core GPU datasheet (H100 SXM); " + _AIC.format("h100_sxm"),
)
_row(
    name="H200-SXM",
    arch="hopper",
    memory_gib=140.4,
    memory_bandwidth_gbps=4800,
    bf16_tflops=989.0,
    fp16_tflops=989.0,
    fp8_tflops=1979.0,
    int8_tops=1979.0,
    pcie_gen=5,
    pcie_gbps=64.0,
    nvlink_gbps=450.0,
    source="NVIDIA H200 Tensor Core GPU datasheet (H200 SXM); " + _AIC.format("h200_sxm"),
)
_row(
    name="H200-NVL",
    arch="hopper",
    memory_gib=140.4,
    memory_bandwidth_gbps=4800,
    bf16_tflops=835.5,
    fp16_tflops=835.5,
    fp8_tflops=1671.0,
    int8_tops=1671.0,
    pcie_gen=5,
    pcie_gbps=64.0,
    nvlink_gbps=450.0,  # 2- or 4-way NVLink bridge, 900 GB/s both directions
    source="NVIDIA H200 Tensor Core GPU datasheet (H200 NVL)",
)
_row(
    name="cpu",
    arch="cpu",
    memory_gib=16.0,
    memory_bandwidth_gbps=40.0,
    bf16_tflops=1.0,
    fp16_tflops=1.0,
    pcie_gen=3,
    pcie_gbps=10.0,  # no host link: a RAM-to-RAM copy stands in
    source="generic x86-64 host with AVX-512 bf16 (order of magnitude; profile to refine)",
)
_index()
