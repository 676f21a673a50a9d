"""plan.yaml: Pareto points, each a full placement of instances (docs/plan-format.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_serializer, model_validator

from planner.engines.kinds import DEFAULT_KIND, engine_kinds, load_engine
from planner.schemas.common import SafeName, Strict, duplicates
from planner.schemas.models import Substitute

Tier = Literal["gpu", "host", "disk"]


class InputRef(Strict):
    """Where an input came from and its content hash."""

    path: str = Field(default="", description="path as given to optimize")
    sha256: str = Field(default="", description="hex SHA-256 of the file")


class CalibrationRef(Strict):
    """What one GPU type's perf factors were fitted from (its profile's `calibration`)."""

    node: str = Field(default="", description="the node whose profile gave the factors")
    source: str = Field(default="", description="what the factors come from")
    runs: list[str] = Field(
        default_factory=list, description="the engine and serving runs the fit used"
    )
    fields: list[str] = Field(
        default_factory=list, description="the calibration fields that replace the defaults"
    )
    models: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="model -> its own factors (its runs' fit)"
    )


class MemoryGib(Strict):
    """Per-GPU memory of an instance when awake, GiB."""

    weights: float = Field(ge=0, description="weights on each GPU, GiB")
    kv: float = Field(ge=0, description="KV cache on each GPU, GiB")
    overhead: float = Field(ge=0, description="activations, CUDA graphs, context, GiB")
    asleep: float = Field(
        default=0.0, ge=0, description="what the process keeps on each GPU asleep (context), GiB"
    )

    @property
    def total(self) -> float:
        """Awake: weights, KV cache and overhead, GiB."""
        return self.weights + self.kv + self.overhead


class EngineArgs(Strict):
    """The engine an instance runs (`kind`) and its arguments (vLLM's names)."""

    kind: str = Field(
        default=DEFAULT_KIND,
        description="engine program (planner/engines/); written only when not the default",
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="share of GPU memory vLLM may use"
    )
    max_model_len: int = Field(default=32768, ge=16, description="longest sequence, tokens")
    max_num_seqs: int = Field(default=64, ge=1, le=4096, description="most sequences in a batch")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=16, description="chunked-prefill token budget per step"
    )
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"] = Field(
        default="auto", description="KV cache precision"
    )
    quantization: str | None = Field(
        default=None, description="--quantization; None: from the checkpoint"
    )
    enforce_eager: bool = Field(default=False, description="skip CUDA graphs (faster start)")
    extra_args: list[str] = Field(
        default_factory=list,
        description="more engine flags, verbatim; not those the planner sets itself "
        "(vLLM: planner.engines.vllm.MANAGED_FLAGS)",
    )

    @field_validator("extra_args")
    @classmethod
    def _no_managed_flags(cls, v: list[str], info: ValidationInfo) -> list[str]:
        kind = info.data.get("kind")
        if kind not in engine_kinds():
            return v  # the unknown kind is the error to report
        hit = load_engine(kind).managed_flag(v)  # the one list, beside the argv it guards
        if hit is not None:
            arg, owner = hit
            raise ValueError(
                f"extra_args sets {arg!r}, which the planner manages: set it through {owner}, "
                "or drop it"
            )
        return v

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in engine_kinds():
            raise ValueError(f"unknown engine kind {v!r}; known: {', '.join(engine_kinds())}")
        return v

    @model_serializer(mode="wrap")
    def _omit_default_kind(self, handler: Any) -> dict[str, Any]:
        # plans written before engines had a kind stay byte-identical, and so do the spec
        # hashes of running instances (adjuster.reconcile.spec_sha)
        data: dict[str, Any] = handler(self)
        if data.get("kind") == DEFAULT_KIND:
            data.pop("kind")
        return data


class Instance(Strict):
    """One vLLM server."""

    id: SafeName = Field(description="unique within the point; names the server's log file")
    model: SafeName = Field(description="model name from models.yaml")
    variant: SafeName = Field(description="variant name of that model")
    node: SafeName = Field(description="node name from cluster.yaml")
    gpu_type: str = Field(
        default="", description="GPU type of `gpus` (cluster.yaml), for readers; '' in old plans"
    )
    gpus: list[int] = Field(default_factory=list, description="device indices on that node")
    tp: int = Field(default=1, ge=1, le=64, description="tensor-parallel degree")
    tier: Tier = Field(default="gpu", description="gpu: always awake; host/disk: sleeps when idle")
    awake_hours: list[int] = Field(
        default_factory=list,
        description="host/disk: hours of the day (UTC, 0-23) it is woken ahead of its requests "
        "and kept awake; []: woken by requests only",
    )
    shares_gpu_with: list[str] = Field(
        default_factory=list,
        description="ids of this point's instances on a common GPU (they time-share it)",
    )
    memory_gib: MemoryGib = Field(description="per GPU, when awake")
    kv_cpu_offload_gib: float = Field(default=0, ge=0, description="KV cache in host RAM, GiB")
    expert_cpu_offload_gib: float = Field(
        default=0, ge=0, description="weights/experts in host RAM, GiB"
    )
    engine: EngineArgs = Field(default_factory=EngineArgs, description="vLLM engine args")
    port: int = Field(ge=1024, le=65535, description="HTTP port of the server")

    @model_validator(mode="after")
    def _tp_matches_gpus(self) -> Instance:
        if self.gpus and len(self.gpus) != self.tp:
            raise ValueError(f"tp is {self.tp} but {len(self.gpus)} GPUs are listed")
        dup = duplicates(self.gpus)
        if dup:
            raise ValueError(f"GPU ids {dup} are listed twice; an instance uses each GPU once")
        if self.awake_hours:
            if self.tier == "gpu":
                raise ValueError(
                    "awake_hours is for host/disk instances (gpu-tier ones never sleep)"
                )
            if any(not 0 <= h <= 23 for h in self.awake_hours) or duplicates(self.awake_hours):
                raise ValueError(f"awake_hours {self.awake_hours}: distinct hours 0-23")
        return self


class Predicted(Strict):
    """What the simulator predicts for a point on the workload it was optimized for."""

    switch_p95_s: float = 0.0
    ttft_p95_s: float = 0.0
    tpot_p95_s: float = 0.0
    slo_attainment: float = 1.0
    warm_gpu_gib: float = 0.0
    gpus_used: int = 0
    quality_cost: float = Field(
        default=0.0, ge=0, description="quality penalty per request: variants' and stand-ins'"
    )


class SubstituteRule(Strict):
    """When a model's requests go to an awake stand-in (models.yaml `substitutes`)."""

    when: Literal["wake_exceeds_slo", "always_while_waking"] = Field(
        description="the predicted wait exceeds max_wait_s, or any wait"
    )
    max_wait_s: float | None = Field(
        default=None, ge=0, description="the model's switch SLO; None: no target, never exceeded"
    )
    wake: bool = Field(default=True, description="the model still wakes")
    to: list[Substitute] = Field(min_length=1, description="the stand-ins, in declared order")


class Point(Strict):
    """One Pareto point: a complete placement."""

    name: str = Field(min_length=1, description="point name, e.g. balanced")
    predicted: Predicted = Field(
        default_factory=Predicted,
        description="simulator's figures on the held-back days (on the whole trace if none)",
    )
    predicted_fit: Predicted | None = Field(
        default=None, description="simulator's figures on the days the search fitted to"
    )
    instances: list[Instance] = Field(default_factory=list, description="the vLLM servers")
    notes: list[str] = Field(default_factory=list, description="binding constraints, warnings")
    idle_sleep_s: float | None = Field(
        default=None,
        gt=0,
        description="host/disk instances sleep after this long without a request, outside "
        "their awake_hours, s; None: only when a co-tenant's wake needs the memory",
    )
    gpu_usable_gib: dict[str, dict[int, float]] = Field(
        default_factory=dict,
        description="node -> device -> GiB the plan may fill (co-tenants awake together up to "
        "it); a GPU not listed holds one host/disk instance awake at a time",
    )
    substitutes: dict[str, SubstituteRule] = Field(
        default_factory=dict, description="model -> when its requests go to a stand-in"
    )
    handoff: dict[str, list[str]] = Field(
        default_factory=dict,
        description="model -> models often asked next in the same session: a request for it "
        "wakes their sleeping host/disk instance where that puts no co-tenant to sleep",
    )
    for_traffic_share: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="a quiet rung: meets the targets at this share of the fitted traffic (its "
        "`predicted` figures are on the chosen days thinned to it), not at all of it; the "
        "adjuster hops to it when its forecast falls. None: a point for the fitted traffic",
    )
    predicted_full: Predicted | None = Field(
        default=None,
        description="a quiet rung's figures on the same chosen days at all of their traffic "
        "(the adjuster reads between them and `predicted` how far the traffic may rise before "
        "it misses the targets). None: not a quiet rung, or a plan written before",
    )

    @model_validator(mode="after")
    def _unique(self) -> Point:
        dup = duplicates(i.id for i in self.instances)
        if dup:
            raise ValueError(f"duplicate instance ids in point {self.name!r}: {dup}")
        dupp = duplicates((i.node, i.port) for i in self.instances)
        if dupp:
            raise ValueError(f"two instances share a node and port in point {self.name!r}: {dupp}")
        models = {i.model for i in self.instances}
        stray = sorted({m for a, bs in self.handoff.items() for m in (a, *bs)} - models)
        if stray:
            raise ValueError(
                f"handoff of point {self.name!r} names models no instance of it runs: {stray} "
                "(remove them from `handoff`)"
            )
        return self


class Hop(Strict):
    """What moving from one point to another takes (apply's actions) and its predicted cost."""

    restarts: int = Field(default=0, ge=0, description="instances (re)started: cold starts")
    wakes: int = Field(default=0, ge=0, description="sleepers moved to the gpu tier")
    sleeps: int = Field(default=0, ge=0, description="awake instances moved to a lazy tier")
    cost_s: float = Field(default=0.0, ge=0, description="cold starts + wakes + sleeps, s")
    restart_s: float = Field(
        default=0.0, ge=0, description="the cold starts alone (0 in plans written before), s"
    )
    moved_gib: float = Field(
        default=0.0,
        ge=0,
        description="GPU memory the restarted instances load, all their GPUs (0: sleeps and "
        "wakes only, or a plan written before), GiB",
    )


class ModelCapacity(Strict):
    """One model's peak demand against the most the cluster could serve (overload table)."""

    model: str = Field(description="model name")
    peak_requests_per_h: float = Field(ge=0, description="busiest hour's requests")
    peak_prefill_tokens_per_s: float = Field(ge=0, description="that hour's new prompt tokens/s")
    peak_decode_tokens_per_s: float = Field(ge=0, description="that hour's output tokens/s")
    capacity_requests_per_h: float = Field(ge=0, description="most the GPUs it fits on serve")
    hours_over: list[int] = Field(
        default_factory=list, description="hours from the trace's first 00:00 beyond capacity"
    )


class Plan(Strict):
    """kind: plan."""

    kind: Literal["plan"] = "plan"
    version: Literal[1] = 1
    inputs: dict[str, InputRef] = Field(default_factory=dict, description="provenance of inputs")
    calibration: dict[str, CalibrationRef] = Field(
        default_factory=dict,
        description="GPU type -> the profile runs its perf factors were fitted from",
    )
    workload_summary: dict[str, Any] = Field(
        default_factory=dict, description="the drift reference"
    )
    search: dict[str, Any] = Field(default_factory=dict, description="seed, evaluations, solver")
    selected: str = Field(description="the point `apply` uses by default")
    points: list[Point] = Field(min_length=1, description="Pareto points")
    notes: list[str] = Field(default_factory=list, description="overload and search notes")
    capacity: list[ModelCapacity] = Field(
        default_factory=list, description="per model demand vs capacity, when overloaded"
    )
    hops: dict[str, dict[str, Hop]] = Field(
        default_factory=dict, description="FROM point -> TO point -> what the hop takes"
    )

    @model_validator(mode="after")
    def _selected_exists(self) -> Plan:
        names = [p.name for p in self.points]
        dup = duplicates(names)
        if dup:
            raise ValueError(f"duplicate point names: {dup}")
        if self.selected not in names:
            raise ValueError(f"selected point {self.selected!r} is not among the points {names}")
        return self

    def point(self, name: str | None = None) -> Point:
        """The named point, or the selected one (KeyError if absent)."""
        want = name or self.selected
        for p in self.points:
            if p.name == want:
                return p
        raise KeyError(want)
