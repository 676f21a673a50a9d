"""The one schema of the built-in catalogs, and their loader.

The catalogs are data shipped with the package (`planner/catalog/gpus.yaml`,
`planner/catalog/models.yaml`, read with importlib.resources): one row per GPU type or
model architecture, each naming its source (a datasheet, a Hugging Face config.json).
Adding a GPU or a model is a row in one of those files; this module validates every row
(the same fields inline specs in cluster.yaml / models.yaml use) and refuses a row
without a source or a name used twice.
"""

from __future__ import annotations

from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from planner.errors import InputError


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
    fp4_tflops: float | None = Field(
        default=None,
        gt=0,
        description="dense fp4 (NVFP4/MXFP4) tensor rate, TFLOP/s; None: no fp4 compute",
    )
    int8_tops: float | None = Field(default=None, gt=0, description="dense int8 tensor rate, TOP/s")
    pcie_gen: int = Field(default=4, ge=3, le=6, description="PCIe generation of the host link")
    pcie_gbps: float = Field(
        default=25.0, gt=0, le=1000, description="host<->device bandwidth per direction, GB/s"
    )
    nvlink_gbps: float | None = Field(
        default=None, gt=0, description="GPU<->GPU NVLink bandwidth per direction, GB/s; None: none"
    )
    sm_count: int | None = Field(
        default=None, ge=1, le=1024, description="streaming multiprocessors; None: unknown"
    )
    boost_clock_mhz: float | None = Field(
        default=None, gt=0, le=5000, description="boost clock of the SMs, MHz; None: unknown"
    )
    source: str = Field(default="inline", description="where these numbers come from")


class ModelArch(BaseModel):
    """Architecture numbers the perf model needs. Inline specs in models.yaml use these fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="catalog name: the HF repo name without the organisation")
    hf_repo: str = Field(default="", description="`org/name` on Hugging Face")
    family: str = Field(default="llama", description="config.json model_type")
    num_layers: int = Field(ge=1, le=1000, description="decoder layers")
    hidden_size: int = Field(ge=1, description="model width")
    num_attention_heads: int = Field(ge=1, description="query heads")
    num_kv_heads: int = Field(ge=1, description="key/value heads (GQA)")
    head_dim: int = Field(ge=1, description="per-head dimension")
    intermediate_size: int = Field(ge=0, description="dense MLP width (0 when every layer is MoE)")
    vocab_size: int = Field(ge=1, description="vocabulary size")
    tie_word_embeddings: bool = Field(default=False, description="lm_head shares the embedding")
    num_experts: int = Field(default=0, ge=0, description="routed experts per MoE layer; 0: dense")
    num_experts_per_tok: int = Field(default=0, ge=0, description="routed experts active per token")
    moe_intermediate_size: int = Field(default=0, ge=0, description="width of one expert's MLP")
    num_shared_experts: int = Field(default=0, ge=0, description="always-active shared experts")
    first_dense_layers: int = Field(default=0, ge=0, description="leading layers with a dense MLP")
    kv_lora_rank: int = Field(default=0, ge=0, description="MLA latent KV rank; 0: no MLA")
    qk_rope_head_dim: int = Field(default=0, ge=0, description="MLA decoupled RoPE key dim")
    sliding_window: int = Field(default=0, ge=0, description="window of sliding layers, tokens")
    num_sliding_layers: int = Field(
        default=0, ge=0, description="layers with sliding-window attention"
    )
    total_params_b: float = Field(gt=0, description="total parameters, billions")
    active_params_b: float = Field(gt=0, description="parameters active per token, billions")
    max_position_embeddings: int = Field(default=32768, ge=1, description="longest context, tokens")
    q_lora_rank: int = Field(default=0, ge=0, description="MLA query low-rank dim; 0: full q_proj")
    qk_nope_head_dim: int = Field(default=0, ge=0, description="MLA per-head non-RoPE q/k dim")
    v_head_dim: int = Field(default=0, ge=0, description="MLA per-head value dim")
    source: str = Field(default="inline", description="where these numbers come from")

    @property
    def is_moe(self) -> bool:
        """Whether MLP layers route among experts."""
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """Whether attention caches a compressed latent (DeepSeek MLA)."""
        return self.kv_lora_rank > 0

    @property
    def num_full_layers(self) -> int:
        """Layers with full (global) attention."""
        return self.num_layers - self.num_sliding_layers

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP routes among experts."""
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def tp_norm_allreduces(self) -> int:
        """All-reduces per layer that tensor parallelism adds beyond its two (after attention
        and after the MLP): MiniMax-M2 normalizes q and k over all heads at once (vLLM's
        MiniMaxText01RMSNormTP), so each layer sums their squares across the GPUs first."""
        return 1 if self.family == "minimax_m2" else 0


def _sourced(v: str) -> str:
    if not v.strip() or v == "inline":
        raise ValueError("a catalog row must name its source (datasheet, config.json URL)")
    return v


class GpuRow(GpuSpec):
    """A catalog GPU: an inline spec that names its source."""

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return _sourced(v)


class ModelRow(ModelArch):
    """A catalog architecture: the inline fields, its source, and other names users write."""

    aliases: list[str] = Field(
        default_factory=list, description="other names that resolve to this row"
    )

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return _sourced(v)

    def arch(self) -> ModelArch:
        """The row without its aliases."""
        return ModelArch(**self.model_dump(exclude={"aliases"}))


def _unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n.lower() in seen:
            raise ValueError(f"{what} {n!r} appears twice (names are case-insensitive)")
        seen.add(n.lower())


class GpuCatalog(BaseModel):
    """`planner/catalog/gpus.yaml`."""

    model_config = ConfigDict(extra="forbid")

    gpus: list[GpuRow] = Field(min_length=1, description="one row per GPU type")

    @model_validator(mode="after")
    def _names(self) -> GpuCatalog:
        _unique([g.name for g in self.gpus], "GPU")
        return self


class ModelCatalog(BaseModel):
    """`planner/catalog/models.yaml`."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelRow] = Field(min_length=1, description="one row per architecture")

    @model_validator(mode="after")
    def _names(self) -> ModelCatalog:
        _unique([n for m in self.models for n in (m.name, *m.aliases)], "model name or alias")
        return self


def _loc(loc: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def parse_catalog(text: str, model: type[BaseModel], file: str) -> BaseModel:
    """Validate the YAML text of one catalog file; errors name the file, row and field."""
    try:
        # the C loader where libyaml is built in: the catalogs load on import
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        return model.model_validate(data)
    except yaml.YAMLError as e:
        raise InputError(f"not valid YAML: {e}", file=file, fix="fix the YAML syntax") from None
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        raise InputError(
            err["msg"].removeprefix("Value error, "),
            file=file,
            path=_loc(err["loc"]) or "(top level)",
            fix=f"see the fields of {model.__name__} in planner/catalog/schema.py",
        ) from None


def load_catalog(name: Literal["gpus", "models"]) -> BaseModel:
    """The packaged catalog `name`.yaml, validated."""
    model = GpuCatalog if name == "gpus" else ModelCatalog
    text = resources.files("planner.catalog").joinpath(f"{name}.yaml").read_text("utf-8")
    return parse_catalog(text, model, f"planner/catalog/{name}.yaml")
