"""profiles/<node>-<gpu>.yaml: measurements of one GPU type on one node, and fitted factors."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.schemas.common import Strict


class Stat(Strict):
    """A repeated measurement: median and spread (p90 - p10), in the unit of the key."""

    median: float = Field(description="median of the repetitions")
    spread: float = Field(default=0.0, ge=0, description="p90 - p10 of the repetitions")
    n: int = Field(default=1, ge=1, description="repetitions")


class Environment(Strict):
    """Where the profile was taken."""

    hostname: str = ""
    device_name: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    vllm: str = ""
    created_at: str = ""


class Hardware(Strict):
    """Microbenchmarks of one device type."""

    gemm_tflops: dict[str, Stat] = Field(default_factory=dict, description="dtype -> dense GEMM rate, TFLOP/s")
    device_copy_gbps: Stat | None = Field(default=None, description="device memory copy, GB/s")
    h2d_pinned_gbps: Stat | None = Field(default=None, description="host->device pinned, GB/s")
    h2d_pageable_gbps: Stat | None = Field(default=None, description="host->device pageable, GB/s")
    d2h_pinned_gbps: Stat | None = Field(default=None, description="device->host pinned, GB/s")
    disk_read_gbps: Stat | None = Field(default=None, description="cold sequential file read, GB/s")
    ram_gbps: Stat | None = Field(default=None, description="host RAM copy, GB/s")


class PrefillPoint(Strict):
    """Latency of one prompt with max_tokens=1."""

    prompt_tokens: int = Field(ge=1)
    latency_s: Stat


class DecodePoint(Strict):
    """Time per output token at a concurrency."""

    concurrency: int = Field(ge=1)
    output_tokens: int = Field(default=64, ge=1)
    prompt_tokens: int = Field(default=16, ge=1)
    tpot_s: Stat


class EngineRun(Strict):
    """One (model, variant, TP) profiled on a real vLLM server."""

    model: str
    variant: str
    tp: int = Field(default=1, ge=1)
    status: Literal["ok", "failed"] = "ok"
    reason: str = Field(default="", description="classified failure reason when status=failed")
    detail: str = Field(default="", description="last log lines of a failure")
    cold_start_s: float | None = None
    weight_load_s: float | None = None
    engine_init_s: float | None = None
    kv_capacity_tokens: int | None = None
    prefill: list[PrefillPoint] = Field(default_factory=list)
    decode: list[DecodePoint] = Field(default_factory=list)
    sleep_l1_s: float | None = None
    wake_l1_s: float | None = None
    sleep_l2_s: float | None = None
    wake_l2_s: float | None = None


class Calibration(Strict):
    """Fitted perf-model factors for this GPU type (replace the spec-sheet defaults)."""

    compute_efficiency: float | None = Field(default=None, gt=0, le=2, description="achieved/peak FLOP/s")
    bandwidth_efficiency: float | None = Field(default=None, gt=0, le=2, description="achieved/peak memory BW")
    step_overhead_s: float | None = Field(default=None, ge=0, description="fixed time per engine step, s")
    prefill_overhead_s: float | None = Field(default=None, ge=0, description="fixed time per request, s")
    engine_init_s: float | None = Field(default=None, ge=0, description="engine init on cold start, s")
    h2d_gbps: float | None = Field(default=None, gt=0, description="wake bandwidth host->GPU, GB/s")
    disk_read_gbps: float | None = Field(default=None, gt=0, description="weights read, GB/s")
    residual_rel: float | None = Field(default=None, ge=0, description="median relative fit error")


class Profile(Strict):
    """kind: profile."""

    kind: Literal["profile"] = "profile"
    version: Literal[1] = 1
    node: str = Field(description="node name")
    gpu_type: str = Field(description="catalog GPU type (or `cpu`)")
    environment: Environment = Field(default_factory=Environment)
    hardware: Hardware = Field(default_factory=Hardware)
    engine: list[EngineRun] = Field(default_factory=list)
    calibration: Calibration = Field(default_factory=Calibration)
