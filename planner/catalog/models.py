"""Built-in model architecture catalog (numbers from each model's official config.json)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


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
    num_sliding_layers: int = Field(default=0, ge=0, description="layers with sliding-window attention")
    total_params_b: float = Field(gt=0, description="total parameters, billions")
    active_params_b: float = Field(gt=0, description="parameters active per token, billions")
    max_position_embeddings: int = Field(default=32768, ge=1, description="longest context, tokens")
    source: str = Field(default="inline", description="where these numbers come from")

    @property
    def is_moe(self) -> bool:
        """Whether MLP layers route among experts."""
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """Whether attention caches a compressed latent (DeepSeek MLA)."""
        return self.kv_lora_rank > 0


_MODELS: list[ModelArch] = []  # rows below

MODELS: dict[str, ModelArch] = {}


def resolve_arch_name(name: str) -> ModelArch:
    """Catalog lookup by `name` or `org/name` (case-insensitive); ValueError with a hint."""
    key = name.split("/")[-1]
    lower = {k.lower(): v for k, v in MODELS.items()}
    if key.lower() in lower:
        return lower[key.lower()]
    close = difflib.get_close_matches(key, list(MODELS), n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ValueError(
        f"{name!r} is not a known architecture{hint}; see `planner catalog models`, "
        "or give a path to a Hugging Face config.json, or inline numbers"
    )


def from_hf_config(cfg: dict, name: str = "custom") -> ModelArch:
    """Architecture numbers from a Hugging Face config.json dict (families of the catalog)."""
    raise NotImplementedError  # filled by the catalog work


def resolve_arch(spec: str | ModelArch, base_dir: Path | None = None) -> ModelArch:
    """A catalog name, `org/name`, a path to a config.json (or its folder), or inline numbers."""
    if isinstance(spec, ModelArch):
        return spec
    p = Path(spec)
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    if spec.endswith(".json") or p.is_dir():
        cfg_path = p / "config.json" if p.is_dir() else p
        if not cfg_path.is_file():
            raise ValueError(f"config file {str(cfg_path)!r} does not exist")
        try:
            cfg = json.loads(cfg_path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read {str(cfg_path)!r} as JSON: {e}") from None
        return from_hf_config(cfg, name=cfg_path.parent.name)
    return resolve_arch_name(spec)
