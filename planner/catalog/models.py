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


_MODELS: list[ModelArch] = []  # rows below

MODELS: dict[str, ModelArch] = {}

# Names users write that are not repo names of a row (base checkpoints share the numbers).
ALIASES: dict[str, str] = {}


def _row(aliases: tuple[str, ...] = (), **kw) -> None:
    arch = ModelArch(**kw)
    _MODELS.append(arch)
    for a in aliases:
        ALIASES[a.lower()] = arch.name


def _index() -> None:
    MODELS.clear()
    MODELS.update({m.name: m for m in _MODELS})


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


_L31_8B = dict(
    family="llama",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=128256,
    total_params_b=8.03,
    active_params_b=8.03,
    max_position_embeddings=131072,
)
_L70B = dict(
    family="llama",
    num_layers=80,
    hidden_size=8192,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=28672,
    vocab_size=128256,
    total_params_b=70.55,
    active_params_b=70.55,
    max_position_embeddings=131072,
)
_Q25_7B = dict(
    family="qwen2",
    num_layers=28,
    hidden_size=3584,
    num_attention_heads=28,
    num_kv_heads=4,
    head_dim=128,
    intermediate_size=18944,
    vocab_size=152064,
    total_params_b=7.62,
    active_params_b=7.62,
    max_position_embeddings=32768,
)
_row(
    name="Llama-3.1-8B-Instruct",
    hf_repo="meta-llama/Llama-3.1-8B-Instruct",
    source=_hf("meta-llama/Llama-3.1-8B-Instruct"),
    aliases=("Meta-Llama-3.1-8B-Instruct",),
    **_L31_8B,
)
_row(
    name="Llama-3.1-8B",
    hf_repo="meta-llama/Llama-3.1-8B",
    source=_hf("meta-llama/Llama-3.1-8B"),
    aliases=("Meta-Llama-3.1-8B",),
    **_L31_8B,
)
_row(
    name="Llama-3.1-70B-Instruct",
    hf_repo="meta-llama/Llama-3.1-70B-Instruct",
    source=_hf("meta-llama/Llama-3.1-70B-Instruct"),
    **_L70B,
)
_row(
    name="Llama-3.1-70B",
    hf_repo="meta-llama/Llama-3.1-70B",
    source=_hf("meta-llama/Llama-3.1-70B"),
    **_L70B,
)
_row(
    name="Llama-3.3-70B-Instruct",
    hf_repo="meta-llama/Llama-3.3-70B-Instruct",
    source=_hf("meta-llama/Llama-3.3-70B-Instruct"),
    aliases=("Llama-3.3-70B",),
    **_L70B,
)
_row(
    name="Qwen2.5-7B-Instruct",
    hf_repo="Qwen/Qwen2.5-7B-Instruct",
    source=_hf("Qwen/Qwen2.5-7B-Instruct"),
    aliases=("Qwen2.5-7B",),
    **_Q25_7B,
)
_row(
    name="Qwen2.5-Coder-7B-Instruct",
    hf_repo="Qwen/Qwen2.5-Coder-7B-Instruct",
    source=_hf("Qwen/Qwen2.5-Coder-7B-Instruct"),
    aliases=("Qwen2.5-Coder-7B",),
    **_Q25_7B,
)
_row(
    name="Qwen2.5-Coder-32B-Instruct",
    hf_repo="Qwen/Qwen2.5-Coder-32B-Instruct",
    source=_hf("Qwen/Qwen2.5-Coder-32B-Instruct"),
    aliases=("Qwen2.5-Coder-32B",),
    family="qwen2",
    num_layers=64,
    hidden_size=5120,
    num_attention_heads=40,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=27648,
    vocab_size=152064,
    total_params_b=32.76,
    active_params_b=32.76,
    max_position_embeddings=32768,
)
_row(
    name="Qwen2.5-14B-Instruct",
    hf_repo="Qwen/Qwen2.5-14B-Instruct",
    source=_hf("Qwen/Qwen2.5-14B-Instruct"),
    aliases=("Qwen2.5-14B",),
    family="qwen2",
    num_layers=48,
    hidden_size=5120,
    num_attention_heads=40,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=13824,
    vocab_size=152064,
    total_params_b=14.77,
    active_params_b=14.77,
    max_position_embeddings=32768,
)
_row(
    name="Qwen3-8B",
    hf_repo="Qwen/Qwen3-8B",
    source=_hf("Qwen/Qwen3-8B"),
    family="qwen3",
    num_layers=36,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=12288,
    vocab_size=151936,
    total_params_b=8.19,
    active_params_b=8.19,
    max_position_embeddings=40960,
)
_row(
    name="Qwen3-32B",
    hf_repo="Qwen/Qwen3-32B",
    source=_hf("Qwen/Qwen3-32B"),
    family="qwen3",
    num_layers=64,
    hidden_size=5120,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=25600,
    vocab_size=151936,
    total_params_b=32.76,
    active_params_b=32.76,
    max_position_embeddings=40960,
)
_row(
    name="Qwen3-30B-A3B",
    hf_repo="Qwen/Qwen3-30B-A3B",
    source=_hf("Qwen/Qwen3-30B-A3B"),
    family="qwen3_moe",
    num_layers=48,
    hidden_size=2048,
    num_attention_heads=32,
    num_kv_heads=4,
    head_dim=128,
    intermediate_size=6144,
    vocab_size=151936,
    num_experts=128,
    num_experts_per_tok=8,
    moe_intermediate_size=768,
    total_params_b=30.53,
    active_params_b=3.35,
    max_position_embeddings=40960,
)
_row(
    name="Qwen3-235B-A22B",
    hf_repo="Qwen/Qwen3-235B-A22B",
    source=_hf("Qwen/Qwen3-235B-A22B"),
    family="qwen3_moe",
    num_layers=94,
    hidden_size=4096,
    num_attention_heads=64,
    num_kv_heads=4,
    head_dim=128,
    intermediate_size=12288,
    vocab_size=151936,
    num_experts=128,
    num_experts_per_tok=8,
    moe_intermediate_size=1536,
    total_params_b=235.09,
    active_params_b=22.14,
    max_position_embeddings=40960,
)
_M7B = dict(
    family="mistral",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=32768,
    total_params_b=7.25,
    active_params_b=7.25,
    max_position_embeddings=32768,
)
_row(
    name="Mistral-7B-Instruct-v0.3",
    hf_repo="mistralai/Mistral-7B-Instruct-v0.3",
    source=_hf("mistralai/Mistral-7B-Instruct-v0.3"),
    **_M7B,
)
_row(
    name="Mistral-7B-v0.3",
    hf_repo="mistralai/Mistral-7B-v0.3",
    source=_hf("mistralai/Mistral-7B-v0.3"),
    **_M7B,
)
_row(
    name="Mistral-Small-24B-Instruct-2501",
    hf_repo="mistralai/Mistral-Small-24B-Instruct-2501",
    source=_hf("mistralai/Mistral-Small-24B-Instruct-2501"),
    aliases=("Mistral-Small-24B", "Mistral-Small-24B-Base-2501"),
    family="mistral",
    num_layers=40,
    hidden_size=5120,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=32768,
    vocab_size=131072,
    total_params_b=23.57,
    active_params_b=23.57,
    max_position_embeddings=32768,
)
# Gemma 3: 5 local (sliding, 1024 tokens) layers for every global one; 62 layers -> 52 local.
# total_params_b includes the 0.4B SigLIP vision tower vLLM loads with the -it checkpoint.
_row(
    name="gemma-3-27b-it",
    hf_repo="google/gemma-3-27b-it",
    source=_hf("google/gemma-3-27b-it"),
    aliases=("gemma-3-27b", "gemma-3-27b-pt"),
    family="gemma3",
    num_layers=62,
    hidden_size=5376,
    num_attention_heads=32,
    num_kv_heads=16,
    head_dim=128,
    intermediate_size=21504,
    vocab_size=262208,
    tie_word_embeddings=True,
    sliding_window=1024,
    num_sliding_layers=52,
    total_params_b=27.43,
    active_params_b=27.43,
    max_position_embeddings=131072,
)
# MLA: caches a 512-dim latent + 64-dim RoPE key per layer; layer 0 has a dense MLP.
_row(
    name="DeepSeek-V2-Lite",
    hf_repo="deepseek-ai/DeepSeek-V2-Lite",
    source=_hf("deepseek-ai/DeepSeek-V2-Lite"),
    aliases=("DeepSeek-V2-Lite-Chat",),
    family="deepseek_v2",
    num_layers=27,
    hidden_size=2048,
    num_attention_heads=16,
    num_kv_heads=16,
    head_dim=192,
    intermediate_size=10944,
    vocab_size=102400,
    num_experts=64,
    num_experts_per_tok=6,
    moe_intermediate_size=1408,
    num_shared_experts=2,
    first_dense_layers=1,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    total_params_b=15.71,
    active_params_b=2.66,
    max_position_embeddings=163840,
)
# gpt-oss: layers alternate sliding (128 tokens) and full attention; experts ship in MXFP4.
_row(
    name="gpt-oss-20b",
    hf_repo="openai/gpt-oss-20b",
    source=_hf("openai/gpt-oss-20b"),
    family="gpt_oss",
    num_layers=24,
    hidden_size=2880,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=64,
    intermediate_size=0,
    vocab_size=201088,
    num_experts=32,
    num_experts_per_tok=4,
    moe_intermediate_size=2880,
    sliding_window=128,
    num_sliding_layers=12,
    total_params_b=20.91,
    active_params_b=3.61,
    max_position_embeddings=131072,
)
_row(
    name="gpt-oss-120b",
    hf_repo="openai/gpt-oss-120b",
    source=_hf("openai/gpt-oss-120b"),
    family="gpt_oss",
    num_layers=36,
    hidden_size=2880,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=64,
    intermediate_size=0,
    vocab_size=201088,
    num_experts=128,
    num_experts_per_tok=4,
    moe_intermediate_size=2880,
    sliding_window=128,
    num_sliding_layers=18,
    total_params_b=116.83,
    active_params_b=5.13,
    max_position_embeddings=131072,
)
_row(
    name="phi-4",
    hf_repo="microsoft/phi-4",
    source=_hf("microsoft/phi-4"),
    aliases=("Phi-4",),
    family="phi3",
    num_layers=40,
    hidden_size=5120,
    num_attention_heads=40,
    num_kv_heads=10,
    head_dim=128,
    intermediate_size=17920,
    vocab_size=100352,
    total_params_b=14.66,
    active_params_b=14.66,
    max_position_embeddings=16384,
)
_index()


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
    close = difflib.get_close_matches(key, list(MODELS), n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ValueError(
        f"{name!r} is not a known architecture{hint}; see `planner catalog models`, "
        "or give a path to a Hugging Face config.json, or inline numbers"
    )


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
)


def _req(cfg: dict, key: str, family: str):
    if cfg.get(key) is None:
        raise ValueError(f"config.json ({family}) lacks required key {key!r}")
    return cfg[key]


def from_hf_config(cfg: dict, name: str = "custom") -> ModelArch:
    """Architecture numbers from a Hugging Face config.json dict (families of the catalog).

    Parameter totals are not in config.json: they come from the architecture arithmetic.
    A missing required key raises ValueError naming it.
    """
    if not isinstance(cfg, dict):
        raise ValueError("config.json must hold a JSON object")
    family = cfg.get("model_type")
    if family is None:
        raise ValueError("config.json lacks required key 'model_type'")
    if family == "gemma3" and "text_config" in cfg:
        cfg = {**cfg["text_config"], "tie_word_embeddings": cfg.get("tie_word_embeddings", True)}
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
    r = lambda k: _req(cfg, k, family)  # noqa: E731
    heads = int(r("num_attention_heads"))
    hidden = int(r("hidden_size"))
    layers = int(r("num_hidden_layers"))
    kw: dict = dict(
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
    kw.update(sliding_window=int(window) if n_sliding else 0, num_sliding_layers=n_sliding)
    if family == "qwen3_moe":
        kw.update(
            num_experts=int(r("num_experts")),
            num_experts_per_tok=int(r("num_experts_per_tok")),
            moe_intermediate_size=int(r("moe_intermediate_size")),
            first_dense_layers=len(cfg.get("mlp_only_layers") or []),
        )
    elif family == "gpt_oss":
        kw.update(
            num_experts=int(r("num_local_experts")),
            num_experts_per_tok=int(cfg.get("num_experts_per_tok") or r("experts_per_token")),
            moe_intermediate_size=int(r("intermediate_size")),
            intermediate_size=0,
        )
    elif family in ("deepseek_v2", "deepseek_v3"):
        nope, rope = int(r("qk_nope_head_dim")), int(r("qk_rope_head_dim"))
        kw.update(
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
    if kw["intermediate_size"] == 0 and not kw.get("num_experts"):
        r("intermediate_size")
    base = ModelArch(**kw, total_params_b=1.0, active_params_b=1.0)
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
