"""Built-in model architecture catalog: the rows of `models.yaml` (numbers from each model's
official config.json, cited per row), the parameter arithmetic, and config.json parsing."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.catalog.schema import ModelArch, ModelCatalog, load_catalog

__all__ = [
    "ALIASES",
    "MODELS",
    "ModelArch",
    "from_hf_config",
    "hub_quantization",
    "param_counts",
    "resolve_arch",
    "resolve_arch_name",
    "resolve_hub_id",
]


def param_counts(a: ModelArch) -> dict[str, float]:
    """Parameters by part, from the architecture arithmetic (counts, not bytes).

    `linear_*` are the decoder's matmul weights (what weight quantization compresses);
    `embed`/`lm_head` stay in 16 bits; `other` is the rest of the published total
    (norms, biases, routers, a vision tower) and stays in 16 bits too.
    """
    h = a.hidden_size
    if a.is_mla:
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = (
            h * a.q_lora_rank + a.q_lora_rank * a.num_attention_heads * qk
            if a.q_lora_rank
            else h * a.num_attention_heads * qk
        )
        attn = (
            q
            + h * (a.kv_lora_rank + a.qk_rope_head_dim)  # kv_a_proj_with_mqa
            + a.kv_lora_rank
            * a.num_attention_heads
            * (a.qk_nope_head_dim + a.v_head_dim)  # kv_b_proj
            + a.num_attention_heads * a.v_head_dim * h  # o_proj
        )
        attn_kv = 0.0  # MLA has no per-head K/V projections to replicate
    else:
        attn_kv = 2 * h * a.num_kv_heads * a.head_dim  # k_proj + v_proj
        attn = 2 * h * a.num_attention_heads * a.head_dim + attn_kv  # q, o + k, v
    dense_layers = a.first_dense_layers if a.is_moe else a.num_layers
    one_expert = 3 * h * a.moe_intermediate_size  # gate, up, down of one expert
    out = {
        "linear_attn": attn * a.num_layers,
        "linear_attn_kv": attn_kv * a.num_layers,
        "linear_dense_mlp": 3 * h * a.intermediate_size * dense_layers,
        "linear_shared_experts": one_expert * a.num_shared_experts * a.num_moe_layers,
        "linear_routed_experts": one_expert * a.num_experts * a.num_moe_layers,
        "one_expert_all_layers": one_expert * a.num_moe_layers,
        "embed": a.vocab_size * h,
        "lm_head": 0 if a.tie_word_embeddings else a.vocab_size * h,
    }
    known = sum(v for k, v in out.items() if k not in ("linear_attn_kv", "one_expert_all_layers"))
    out["other"] = max(0.0, a.total_params_b * 1e9 - known)
    return out


def _load() -> tuple[dict[str, ModelArch], dict[str, str]]:
    cat = load_catalog("models")
    assert isinstance(cat, ModelCatalog)
    models = {m.name: m.arch() for m in cat.models}
    aliases = {a.lower(): m.name for m in cat.models for a in m.aliases}
    return models, aliases


# Catalog rows by name; ALIASES: lower-cased names users write that are not a row's name
# (base checkpoints share an instruct model's numbers) -> row name.
MODELS, ALIASES = _load()


def resolve_arch_name(name: str) -> ModelArch:
    """Catalog lookup by `name` or `org/name` (case-insensitive); ValueError with a hint."""
    key = name.split("/")[-1]
    lower = {k.lower(): v for k, v in MODELS.items()}
    k = key.lower()
    if k in ALIASES:
        k = ALIASES[k].lower()
    for cand in (k, k + "-instruct", k + "-it"):
        if cand in lower:
            return lower[cand]
    close = closest_arch(key)
    hint = f" (did you mean {close}?)" if close else ""
    if close and "distill-" in key.lower():
        hint = f" (did you mean {close}? a distilled model has its base model's architecture)"
    raise ValueError(
        f"{name!r} is not a known architecture{hint}; see `planner catalog models`, "
        "or give a path to a Hugging Face config.json, or inline numbers"
    )


# Hub repo suffixes that name a checkpoint's quantization, longest first (lower case) ->
# the planner's quantization: `Qwen3-235B-A22B-FP8`, `Llama-3.1-8B-Instruct-FP8-dynamic`,
# `Qwen2.5-7B-Instruct-AWQ`, `Qwen2.5-7B-Instruct-GPTQ-Int4`, `...-quantized.w4a16`
_QUANT_SUFFIXES = (
    ("-fp8-dynamic", "fp8"),
    ("-fp8-static", "fp8"),
    ("-fp8-block", "fp8"),
    ("-fp8", "fp8"),
    ("-awq-int4", "awq"),
    ("-awq", "awq"),
    ("-gptq-int4", "gptq"),
    ("-gptq-4bit", "gptq"),
    ("-gptq", "gptq"),
    ("-quantized.w4a16", "gptq"),
    ("-w4a16", "gptq"),
    ("-int4", "int4"),
    ("-nvfp4", "nvfp4"),
    ("-mxfp4", "mxfp4"),
    ("-bf16", "bf16"),
    ("-fp16", "fp16"),
)
# Other suffixes a hub id carries that name no architecture of their own
_PLAIN_SUFFIXES = ("-instruct", "-chat", "-hf")


def hub_quantization(name: str) -> str | None:
    """The quantization a hub repo id's suffixes name (`-FP8`, `-AWQ`, `-GPTQ-Int4`, ...,
    also before `-Instruct` or `-hf`), else None."""
    low = name.split("/")[-1].lower()
    while True:
        q = next(((s, v) for s, v in _QUANT_SUFFIXES if low.endswith(s)), None)
        if q is not None:
            return q[1]
        plain = next((s for s in _PLAIN_SUFFIXES if low.endswith(s)), None)
        if plain is None:
            return None
        low = low.removesuffix(plain)


def resolve_hub_id(name: str) -> tuple[ModelArch, str | None]:
    """(architecture, quantization the name carries or None) of a hub repo id or catalog name:
    the organisation prefix dropped, then quantization suffixes (`-FP8`, `-AWQ`,
    `-GPTQ-Int4`, ...) and plain ones (`-Instruct`, `-hf`) stripped from the end until a
    catalog row matches; ValueError (`resolve_arch_name`'s, with its hint) when none does."""
    key = name.split("/")[-1]
    while True:
        try:
            return resolve_arch_name(key), hub_quantization(name)
        except ValueError:
            low = key.lower()
            cut = next((s for s, _ in _QUANT_SUFFIXES if low.endswith(s)), None)
            cut = cut or next((s for s in _PLAIN_SUFFIXES if low.endswith(s)), None)
            if cut is None:
                resolve_arch_name(name)  # raises with the hint for the name as given
                raise
            key = key[: len(key) - len(cut)]


_SIZE = re.compile(r"\d+(?:\.\d+)?b")


def closest_arch(name: str) -> str | None:
    """The catalog row `name` most likely shares its architecture with: for a distill, its
    base (`DeepSeek-R1-Distill-Qwen-14B` -> the Qwen 14B row, not a DeepSeek one); else a row
    of the same family and size; else the closest spelling."""
    low = name.lower()
    base = low.split("distill-", 1)[1] if "distill-" in low else low
    words = re.findall(r"[a-z]+|\d+(?:\.\d+)?b", base)
    lows = {n: n.lower() for n in MODELS}
    family = next((w for w in words if len(w) >= 3 and any(w in v for v in lows.values())), None)
    size = next((w for w in words if _SIZE.fullmatch(w)), None)
    if family and size:
        at = re.compile(rf"(?<![\d.]){re.escape(size)}")
        rows = [n for n, v in lows.items() if family in v and at.search(v)]
        if rows:
            return min(rows, key=lambda n: (len(n), n))  # the plainest row of that size
    close = difflib.get_close_matches(name, list(MODELS), n=1, cutoff=0.5)
    return close[0] if close else None


_FAMILIES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "gemma3",
    "gemma3_text",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "phi3",
    "minimax_m2",
    "kimi_k25",
    "kimi_k2",
)


def _req(cfg: dict[str, Any], key: str, family: str) -> Any:
    if cfg.get(key) is None:
        raise ValueError(f"config.json ({family}) lacks required key {key!r}")
    return cfg[key]


def from_hf_config(cfg: dict[str, Any], name: str = "custom") -> ModelArch:
    """Architecture numbers from a Hugging Face config.json dict (families of the catalog).

    Parameter totals are not in config.json: they come from the architecture arithmetic.
    A missing required key raises ValueError naming it.
    """
    if not isinstance(cfg, dict):
        raise ValueError("config.json must hold a JSON object")
    family = cfg.get("model_type")
    if family is None:
        raise ValueError("config.json lacks required key 'model_type'")
    cfg = _language_config(cfg, family)
    if family not in _FAMILIES:
        raise ValueError(
            f"config.json model_type {family!r} is not supported; use one of {list(_FAMILIES)}"
        )

    def r(key: str) -> Any:
        return _req(cfg, key, family)

    heads = int(r("num_attention_heads"))
    hidden = int(r("hidden_size"))
    layers = int(r("num_hidden_layers"))
    kw: dict[str, Any] = dict(
        name=name,
        family=family,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        intermediate_size=int(cfg.get("intermediate_size") or 0),
        vocab_size=int(r("vocab_size")),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", family.startswith("gemma"))),
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 32768),
        source="config.json",
    )
    kw.update(_sliding(cfg, family, layers))
    kw.update(_moe(cfg, family, r))
    if kw["intermediate_size"] == 0 and not kw.get("num_experts"):
        r("intermediate_size")
    return _with_param_counts(ModelArch(**kw, total_params_b=1.0, active_params_b=1.0))


def _language_config(cfg: dict[str, Any], family: str) -> dict[str, Any]:
    """The language model's keys of a config.json (a multimodal wrapper's `text_config`),
    with the transformers defaults gemma-3 leaves out."""
    if family == "gemma3" and "text_config" in cfg:
        cfg = {**cfg["text_config"], "tie_word_embeddings": cfg.get("tie_word_embeddings", True)}
    if family == "kimi_k25" and isinstance(cfg.get("text_config"), dict):
        # the multimodal wrapper: the language model is DeepSeek-V3 (MLA) in text_config
        cfg = {"tie_word_embeddings": cfg.get("tie_word_embeddings", False), **cfg["text_config"]}
    if family.startswith("gemma3"):
        # google/gemma-3-*-it text_config leaves these at the transformers defaults
        cfg = {
            "vocab_size": 262208,
            "sliding_window_pattern": 6,
            "max_position_embeddings": 131072,
            **{k: v for k, v in cfg.items() if v is not None},
        }
    if family not in _FAMILIES:
        raise ValueError(
            f"config.json model_type {family!r} is not supported; use one of {list(_FAMILIES)}"
        )
    return cfg


def _sliding(cfg: dict[str, Any], family: str, layers: int) -> dict[str, Any]:
    """The sliding-window size and how many layers use it."""
    window = cfg.get("sliding_window") or 0
    if family in ("qwen2", "qwen3", "qwen3_moe") and not cfg.get("use_sliding_window"):
        window = 0
    layer_types = cfg.get("layer_types")
    if window and isinstance(layer_types, list):
        n_sliding = sum(1 for t in layer_types if t == "sliding_attention")
    elif window and family.startswith("gemma3"):
        pattern = int(cfg.get("sliding_window_pattern") or 6)  # every `pattern`-th layer is global
        n_sliding = layers - layers // pattern
    else:
        n_sliding = layers if window else 0
    return dict(sliding_window=int(window) if n_sliding else 0, num_sliding_layers=n_sliding)


def _moe(cfg: dict[str, Any], family: str, r: Callable[[str], Any]) -> dict[str, Any]:
    """The experts (and MLA attention) of the MoE families, as ModelArch fields; `r` reads
    a required key."""
    if family == "qwen3_moe":
        return dict(
            num_experts=int(r("num_experts")),
            num_experts_per_tok=int(r("num_experts_per_tok")),
            moe_intermediate_size=int(r("moe_intermediate_size")),
            first_dense_layers=len(cfg.get("mlp_only_layers") or []),
        )
    elif family == "gpt_oss":
        return dict(
            num_experts=int(r("num_local_experts")),
            num_experts_per_tok=int(cfg.get("num_experts_per_tok") or r("experts_per_token")),
            moe_intermediate_size=int(r("intermediate_size")),
            intermediate_size=0,
        )
    elif family == "minimax_m2":
        # every layer is MoE; config.json's intermediate_size is one expert's width
        return dict(
            num_experts=int(r("num_local_experts")),
            num_experts_per_tok=int(r("num_experts_per_tok")),
            moe_intermediate_size=int(r("intermediate_size")),
            intermediate_size=0,
        )
    elif family in ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"):
        nope, rope = int(r("qk_nope_head_dim")), int(r("qk_rope_head_dim"))
        return dict(
            num_experts=int(r("n_routed_experts")),
            num_experts_per_tok=int(r("num_experts_per_tok")),
            moe_intermediate_size=int(r("moe_intermediate_size")),
            num_shared_experts=int(cfg.get("n_shared_experts") or 0),
            first_dense_layers=int(cfg.get("first_k_dense_replace") or 0),
            kv_lora_rank=int(r("kv_lora_rank")),
            qk_rope_head_dim=rope,
            qk_nope_head_dim=nope,
            v_head_dim=int(r("v_head_dim")),
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            head_dim=nope + rope,
        )
    return {}


def _with_param_counts(base: ModelArch) -> ModelArch:
    """`base` with its total and active parameters from the architecture arithmetic."""
    layers, hidden = base.num_layers, base.hidden_size
    pc = param_counts(base)
    total = sum(
        v for k, v in pc.items() if k not in ("linear_attn_kv", "one_expert_all_layers", "other")
    )
    norms = (2 * layers + 1) * hidden  # two RMSNorms a layer + the final one
    router = hidden * base.num_experts * base.num_moe_layers
    total += norms + router
    idle = pc["one_expert_all_layers"] * (base.num_experts - base.num_experts_per_tok)
    return base.model_copy(
        update={"total_params_b": total / 1e9, "active_params_b": (total - idle) / 1e9}
    )


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
