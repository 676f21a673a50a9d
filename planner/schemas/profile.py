"""profiles/<node>-<gpu>.yaml: measurements of one GPU type on one node, and fitted factors."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from planner.catalog.models import ModelArch
from planner.schemas.common import Strict


class Stat(Strict):
    """A repeated measurement: median, spread (p90 - p10) and trimmed mean, in the unit of the
    key."""

    median: float = Field(description="median of the repetitions")
    spread: float = Field(default=0.0, ge=0, description="p90 - p10 of the repetitions")
    n: int = Field(default=1, ge=1, description="repetitions")
    trimmed_mean: float | None = Field(
        default=None,
        description="mean of the repetitions less the highest and the lowest (all of them "
        "under 5; unset: not recorded)",
    )


class Environment(Strict):
    """Where the profile was taken."""

    hostname: str = ""
    device_name: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    engine: str = ""  # the engine kind profiled (planner/engines/); "": not recorded
    engine_version: str = ""  # its package's version (the engine's `package`)
    created_at: str = ""

    @model_validator(mode="before")
    @classmethod
    def _vllm_field(cls, data: Any) -> Any:
        """Profiles written before engine kinds recorded vLLM's version as `vllm`."""
        if isinstance(data, dict) and "vllm" in data:
            data = dict(data)
            version = data.pop("vllm")
            if version and not data.get("engine_version"):
                data.setdefault("engine", "vllm")
                data["engine_version"] = version
        return data


class GemmPoint(Strict):
    """Dense GEMM rate of one (dtype, shape): C[m,n] = A[m,k] @ B[k,n]."""

    dtype: str = Field(description="bf16 | fp16 | fp8 | fp32")
    m: int = Field(ge=1)
    n: int = Field(ge=1)
    k: int = Field(ge=1)
    tflops: Stat = Field(description="2*m*n*k / time, TFLOP/s")


class Hardware(Strict):
    """Microbenchmarks of one device type."""

    gemm_tflops: dict[str, Stat] = Field(
        default_factory=dict, description="dtype -> dense GEMM rate, TFLOP/s (best shape)"
    )
    gemm_points: list[GemmPoint] = Field(
        default_factory=list, description="every (dtype, shape) measured"
    )
    device_copy_gbps: Stat | None = Field(
        default=None, description="device memory copy, read+write bytes, GB/s"
    )
    h2d_pinned_gbps: Stat | None = Field(default=None, description="host->device pinned, GB/s")
    h2d_pageable_gbps: Stat | None = Field(default=None, description="host->device pageable, GB/s")
    d2h_pinned_gbps: Stat | None = Field(default=None, description="device->host pinned, GB/s")
    disk_read_gbps: Stat | None = Field(default=None, description="cold sequential file read, GB/s")
    ram_gbps: Stat | None = Field(default=None, description="host RAM copy, read+write bytes, GB/s")
    notes: list[str] = Field(default_factory=list, description="caveats of these measurements")


class PrefillPoint(Strict):
    """Time to the first streamed token of one prompt (the prefill plus per-request overhead)."""

    prompt_tokens: int = Field(ge=1)
    latency_s: Stat


class IdlePoint(Strict):
    """Time to the first streamed token of one prompt sent `idle_s` after the engine's last
    stream ended: how an idle engine's wake-up grows with the time it was idle."""

    idle_s: float = Field(ge=0)
    prompt_tokens: int = Field(ge=1)
    latency_s: Stat


class DecodePoint(Strict):
    """Time per output token at a concurrency."""

    concurrency: int = Field(ge=1)
    output_tokens: int = Field(default=64, ge=1)
    prompt_tokens: int = Field(default=16, ge=1)
    tpot_s: Stat
    ttft_s: Stat | None = Field(
        default=None, description="time to first token of the same requests"
    )


class EngineRun(Strict):
    """One (model, variant, TP) profiled on a real vLLM server."""

    model: str
    variant: str
    tp: int = Field(default=1, ge=1)
    quantization: str = Field(default="", description="the variant's quantization")
    arch: ModelArch | None = Field(
        default=None, description="architecture numbers (calibration needs them)"
    )
    max_model_len: int | None = Field(default=None, ge=1, description="--max-model-len used")
    max_num_seqs: int | None = Field(default=None, ge=1, description="--max-num-seqs used")
    chunk_tokens: int | None = Field(default=None, ge=1, description="prefill chunk budget used")
    status: Literal["ok", "failed"] = "ok"
    reason: str = Field(default="", description="classified failure reason when status=failed")
    detail: str = Field(default="", description="last log lines of a failure")
    cold_start_s: float | None = None
    weight_load_s: float | None = None
    engine_init_s: float | None = None
    kv_capacity_tokens: int | None = None
    prefill: list[PrefillPoint] = Field(default_factory=list)
    prefill_idle_s: float | None = Field(
        default=None, ge=0, description="quiet before each prefill point's request, s"
    )
    idle: list[IdlePoint] = Field(default_factory=list, description="TTFT by idle time")
    decode: list[DecodePoint] = Field(default_factory=list)
    sleep_l1_s: float | None = None
    wake_l1_s: float | None = None
    sleep_l2_s: float | None = None
    wake_l2_s: float | None = None
    notes: list[str] = Field(default_factory=list, description="caveats of this run")


class FactorFit(Strict):
    """One factor a closed-loop calibration fitted or refused (`calib_loop.FACTORS`)."""

    name: str = Field(
        description="compute | bandwidth | step_overhead | request_overhead | allreduce_scale"
    )
    model: str = Field(default="", description="the model it holds for; empty: the whole GPU")
    factor: float = Field(gt=0, description="on its prior (1: kept at the prior)")
    uncertainty_x: float | None = Field(
        default=None, ge=1, description="one standard deviation, as a multiplicative factor"
    )
    status: Literal["fitted", "refused"] = "fitted"
    note: str = Field(default="", description="why refused, or at a bound")


class ModelFactors(Strict):
    """A calibration's factors that hold for one model only (`Calib.model_factors`)."""

    model: str = Field(description="catalog architecture name")
    factors: dict[str, float] = Field(description="factor -> value on the GPU's calibration")
    gemm: list[Literal["bf16", "fp8", "fp4"]] = Field(
        default_factory=list, description="GEMM efficiencies its compute factor moves"
    )


class CrossCheck(Strict):
    """A calibration's held-out check: mean of TTFT's and TPOT's median |relative error|."""

    split: str = Field(description="leave one configuration (or run, or model) out")
    model: str = Field(default="", description="the model whose runs it checks; empty: all")
    folds: int = Field(ge=1)
    prior_rel: float = Field(ge=0, description="held-out error at the prior")
    fitted_rel: float = Field(ge=0, description="held-out error of the kept factors' fit")
    prior_ttft_rel: float | None = Field(default=None, ge=0, description="TTFT's, at the prior")
    prior_tpot_rel: float | None = Field(default=None, ge=0, description="TPOT's, at the prior")
    fitted_ttft_rel: float | None = Field(default=None, ge=0, description="TTFT's, fitted")
    fitted_tpot_rel: float | None = Field(default=None, ge=0, description="TPOT's, fitted")


class Calibration(Strict):
    """Fitted perf-model factors for this GPU type (replace the spec-sheet defaults)."""

    compute_efficiency: float | None = Field(
        default=None, gt=0, le=2, description="achieved/peak FLOP/s"
    )
    bandwidth_efficiency: float | None = Field(
        default=None, gt=0, le=2, description="achieved/peak memory BW"
    )
    step_overhead_s: float | None = Field(
        default=None, ge=0, description="fixed time per engine step, s"
    )
    prefill_overhead_s: float | None = Field(
        default=None, ge=0, description="fixed time per request (one that finds the engine idle), s"
    )
    busy_prefill_overhead_s: float | None = Field(
        default=None,
        ge=0,
        description="fixed time per request that reaches an engine already at work, s "
        "(CPU build; unset: prefill_overhead_s)",
    )
    idle_wake_curve: list[tuple[float, float]] | None = Field(
        default=None,
        description="(idle s, share): the idle wake-up (prefill_overhead_s minus the busy one) "
        "scales with the time the engine was idle; share 1 at the prefill points' quiet",
    )
    engine_init_s: float | None = Field(
        default=None, ge=0, description="engine init on cold start, s"
    )
    h2d_gbps: float | None = Field(default=None, gt=0, description="wake bandwidth host->GPU, GB/s")
    disk_read_gbps: float | None = Field(default=None, gt=0, description="weights read, GB/s")
    attn_efficiency: float | None = Field(
        default=None, gt=0, le=2, description="achieved/peak attention FLOP/s"
    )
    fp8_compute_efficiency: float | None = Field(
        default=None, gt=0, le=2, description="achieved/peak fp8 GEMM FLOP/s"
    )
    fp4_compute_efficiency: float | None = Field(
        default=None, gt=0, le=2, description="achieved/peak fp4 GEMM FLOP/s"
    )
    d2h_gbps: float | None = Field(
        default=None, gt=0, description="sleep bandwidth GPU->host, GB/s"
    )
    step_jitter_cv: float | None = Field(
        default=None, ge=0, le=2, description="step times' coefficient of variation"
    )
    seq_overhead_s: float | None = Field(
        default=None, ge=0, description="time per sequence in an engine step, s"
    )
    nvlink_efficiency: float | None = Field(
        default=None, gt=0, le=2, description="achieved/peak NVLink rate in TP all-reduces"
    )
    nvlink_latency_s: float | None = Field(
        default=None, ge=0, description="one small TP all-reduce over NVLink, s"
    )
    link_efficiency: float | None = Field(
        default=None, gt=0, le=2, description="achieved/peak PCIe rate in TP all-reduces"
    )
    link_latency_s: float | None = Field(
        default=None, ge=0, description="one small TP all-reduce over PCIe, s"
    )
    points: int | None = Field(default=None, ge=0, description="engine points the fit used")
    source: str = Field(default="", description="what the factors come from")
    residual_rel: float | None = Field(default=None, ge=0, description="median relative fit error")
    runs: list[str] = Field(
        default_factory=list, description="the engine runs the fit used, and where they came from"
    )
    factors: list[FactorFit] = Field(
        default_factory=list, description="closed-loop fit: each factor, fitted or refused"
    )
    models: list[ModelFactors] = Field(
        default_factory=list, description="closed-loop fit: factors that hold for one model"
    )
    checks: list[CrossCheck] = Field(
        default_factory=list, description="closed-loop fit: its held-out checks"
    )
    excluded: list[str] = Field(
        default_factory=list, description="imported runs or points the fit left out, and why"
    )
    notes: list[str] = Field(
        default_factory=list, description="what a reader must know: bounds, step limits"
    )


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
