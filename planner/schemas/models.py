"""models.yaml: the models agents call and the variants each may run as."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from planner.catalog.models import ModelArch, resolve_arch
from planner.schemas.common import SafeName, Strict, duplicates

Quantization = Literal["bf16", "fp16", "fp8", "awq", "gptq", "int4", "mxfp4", "nvfp4"]


class Variant(Strict):
    """One checkpoint of a model in one precision."""

    name: SafeName = Field(description="variant name, unique within the model")
    quantization: Quantization = Field(description="weight precision")
    path: str = Field(default="", description="checkpoint dir or hub id passed to vLLM")
    quality_penalty: float = Field(
        default=0.0, ge=0, le=1, description="quality lost against the best variant, 0..1"
    )
    trust_remote_code: bool = Field(
        default=False,
        description="the checkpoint's own Python may run (plans may then pass "
        "--trust-remote-code in extra_args); only for checkpoints you trust",
    )


class Substitute(Strict):
    """A model whose awake instances may answer for another while that one wakes."""

    model: SafeName = Field(description="name of the stand-in model (models.yaml)")
    variant: SafeName | None = Field(
        default=None, description="only instances running this variant stand in; None: any"
    )
    quality_penalty: float = Field(
        default=0.0, ge=0, le=1, description="quality lost when it answers instead, 0..1"
    )


SubstituteWhen = Literal["never", "wake_exceeds_slo", "always_while_waking"]
Task = Literal["generate", "embed"]


class Pin(Strict):
    """Where a model may run: on one node, on one GPU type, or both."""

    node: SafeName | None = Field(default=None, description="only on this node of the cluster")
    gpu_type: str | None = Field(
        default=None, description="only on GPUs of this type (its name in the cluster)"
    )

    @model_validator(mode="after")
    def _some(self) -> Pin:
        if self.node is None and self.gpu_type is None:
            raise ValueError("a pin names a node, a gpu_type, or both")
        return self


class ModelEntry(Strict):
    """One model agents call by `name`."""

    name: SafeName = Field(description="what agents send as `model`")
    architecture: str | ModelArch = Field(
        description="catalog name, path to a HF config.json, or inline numbers"
    )
    variants: list[Variant] = Field(min_length=1, description="precisions it may run in")
    max_context: int = Field(
        default=32768, ge=16, le=2_097_152, description="longest context, tokens"
    )
    priority: int = Field(default=1, ge=0, le=100, description="higher: served first when short")
    pin: Pin | None = Field(
        default=None, description="keep every instance on this node and/or GPU type"
    )
    task: Task = Field(
        default="generate",
        description="generate: completions, chat and responses; embed: an embedding model "
        "(/v1/embeddings; the engine runs it with its pooling flags)",
    )
    substitutes: list[Substitute] = Field(
        default_factory=list, description="awake models that may answer while this one wakes"
    )
    substitute_when: SubstituteWhen = Field(
        default="never",
        description="when a stand-in answers: the predicted wake exceeds the switch SLO, "
        "or always while waking",
    )
    wake_on_substitute: bool = Field(
        default=True, description="a request a stand-in answers still wakes this model"
    )
    _arch: ModelArch | None = PrivateAttr(default=None)
    _base_dir: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _unique_variants(self) -> ModelEntry:
        dup = duplicates(v.name for v in self.variants)
        if dup:
            raise ValueError(f"duplicate variant names in model {self.name!r}: {dup}")
        return self

    @property
    def engine_args(self) -> list[str]:
        """The engine flags its task needs (plan instances carry them in
        `engine.extra_args`): the default engine's (`Engine.task_args`)."""
        from planner.engines.kinds import DEFAULT_KIND, load_engine

        args: list[str] = load_engine(DEFAULT_KIND).task_args(self.task)
        return args

    @property
    def arch(self) -> ModelArch:
        """The resolved architecture (config.json paths relative to the models file)."""
        if self._arch is None:
            self._arch = resolve_arch(self.architecture, base_dir=self._base_dir)
        return self._arch

    def variant(self, name: str) -> Variant:
        """The variant called `name` (KeyError if absent)."""
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)


class Models(Strict):
    """kind: models."""

    kind: Literal["models"] = "models"
    version: Literal[1] = 1
    models: list[ModelEntry] = Field(min_length=1, description="the model catalog")

    @field_validator("models")
    @classmethod
    def _unique_names(cls, v: list[ModelEntry]) -> list[ModelEntry]:
        dup = duplicates(m.name for m in v)
        if dup:
            raise ValueError(f"duplicate model names: {dup}; each model name must be unique")
        return v

    def model(self, name: str) -> ModelEntry:
        """The model called `name` (KeyError if absent)."""
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        """Model names in file order."""
        return [m.name for m in self.models]


# Upper bounds on architecture numbers, with room above the largest published models
# (hidden 16384 and MLP 53248 in Llama-3.1-405B, 256 experts in DeepSeek-V3, a 10M-token
# context in Llama-4-Scout): a number past them is a typo, and would overflow the perf model.
_ARCH_MAX = {
    "hidden_size": 65536,
    "num_attention_heads": 1024,
    "head_dim": 1024,
    "intermediate_size": 262144,
    "moe_intermediate_size": 262144,
    "vocab_size": 4_194_304,
    "num_experts": 4096,
    "kv_lora_rank": 65536,
    "q_lora_rank": 65536,
    "qk_rope_head_dim": 1024,
    "qk_nope_head_dim": 1024,
    "v_head_dim": 1024,
    "sliding_window": 16_777_216,
    "max_position_embeddings": 16_777_216,
    "total_params_b": 10_000.0,
}


def arch_problem(a: ModelArch) -> tuple[str, str] | None:
    """(field, message) of the first architecture number out of bounds or inconsistent."""
    for name, top in _ARCH_MAX.items():
        v = getattr(a, name)
        if not math.isfinite(v) or v > top:
            return name, f"{name} {v} of {a.name!r} is above the limit {top:g}"
    if not math.isfinite(a.active_params_b) or a.active_params_b > a.total_params_b:
        return "active_params_b", (
            f"active_params_b {a.active_params_b} exceeds total_params_b {a.total_params_b}"
        )
    if a.num_kv_heads > a.num_attention_heads or a.num_attention_heads % a.num_kv_heads:
        return "num_kv_heads", (
            f"{a.num_kv_heads} KV heads do not divide {a.num_attention_heads} query heads "
            "(grouped-query attention shares each KV head among a whole number of query heads)"
        )
    if a.num_experts_per_tok > a.num_experts:
        return "num_experts_per_tok", (
            f"{a.num_experts_per_tok} experts per token but only {a.num_experts} experts"
        )
    for name in ("num_sliding_layers", "first_dense_layers"):
        if getattr(a, name) > a.num_layers:
            return name, f"{name} {getattr(a, name)} exceeds num_layers {a.num_layers}"
    return None
