"""GPU and model catalogs: required rows, resolution by name, config.json parsing, the YAML
data files and the one schema that validates them."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import yaml

from planner.catalog.gpus import GPUS, GpuSpec, resolve_gpu
from planner.catalog.models import (
    MODELS,
    from_hf_config,
    param_counts,
    resolve_arch,
    resolve_arch_name,
)

REQUIRED_GPUS = [
    "RTX-3090",
    "RTX-4090",
    "A10",
    "A10G",
    "L4",
    "L40S",
    "A100-40GB",
    "A100-80GB-PCIe",
    "A100-80GB-SXM",
    "H100-PCIe",
    "H100-SXM",
    "H200-SXM",
    "H200-NVL",
    "cpu",
    "A40",
    "B200-SXM",
    "B300-SXM",
]
REQUIRED_MODELS = [
    "Llama-3.1-8B",
    "Llama-3.1-70B",
    "Llama-3.3-70B",
    "Qwen2.5-7B",
    "Qwen2.5-Coder-7B",
    "Qwen2.5-Coder-32B",
    "Qwen3-8B",
    "Qwen3-32B",
    "Qwen3-30B-A3B",
    "Qwen3-235B-A22B",
    "Mistral-7B-v0.3",
    "Mistral-Small-24B",
    "gemma-3-27b",
    "DeepSeek-V2-Lite",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "Phi-4",
    "MiniMax-M2.5",
    "Kimi-K2.5",
]


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_gpu_rows_present_with_source(name):
    g = resolve_gpu(name)
    assert g.source and g.source != "inline"
    assert g.memory_gib > 0 and g.memory_bandwidth_gbps > 0


def test_ampere_has_no_fp8_and_ada_hopper_do():
    for g in GPUS.values():
        if g.arch == "ampere":
            assert g.fp8_tflops is None, g.name
        if g.arch in ("ada", "hopper", "blackwell"):
            assert g.fp8_tflops and g.fp8_tflops > g.bf16_tflops, g.name


def test_fp4_only_on_blackwell():
    for g in GPUS.values():
        if g.arch == "blackwell":
            assert g.fp4_tflops and g.fp4_tflops > g.fp8_tflops, g.name
        else:
            assert g.fp4_tflops is None, g.name
    assert resolve_gpu("B200-SXM").memory_gib > 160  # vLLM's largest batch defaults apply


def test_geforce_rates_are_fp32_accumulate():
    assert resolve_gpu("RTX-3090").bf16_tflops == 71.0
    assert resolve_gpu("RTX-4090").bf16_tflops == 165.2


def test_nvlink_on_sxm():
    assert resolve_gpu("A100-80GB-SXM").nvlink_gbps == 300
    assert resolve_gpu("H100-SXM").nvlink_gbps == 450
    assert resolve_gpu("L40S").nvlink_gbps is None


def test_gpu_lookup_case_and_hint():
    assert resolve_gpu("l40s").name == "L40S"
    with pytest.raises(ValueError, match=r"did you mean.*A100-80GB-PCIe"):
        resolve_gpu("A100-90GB")


def test_inline_gpu_spec_validates():
    # no pcie_gbps given: the schema default applies
    g = GpuSpec(
        name="X",
        arch="ada",
        memory_gib=32,
        memory_bandwidth_gbps=900,
        bf16_tflops=100,
        fp16_tflops=100,
    )
    assert g.pcie_gbps > 0


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_model_names_resolve(name):
    a = resolve_arch_name(name)
    assert a.total_params_b >= a.active_params_b > 0


def test_org_name_resolves():
    assert resolve_arch_name("meta-llama/Llama-3.1-8B-Instruct").name == "Llama-3.1-8B-Instruct"
    assert resolve_arch_name("Qwen/Qwen3-32B").name == "Qwen3-32B"


def test_unknown_model_hint():
    with pytest.raises(ValueError, match="did you mean"):
        resolve_arch_name("Qwen3-33B")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_param_arithmetic_matches_published_totals(name):
    """The architecture arithmetic explains the published total to 2% (gemma adds a vision tower)."""
    a = MODELS[name]
    pc = param_counts(a)
    known = sum(
        v for k, v in pc.items() if k not in ("linear_attn_kv", "one_expert_all_layers", "other")
    )
    assert known / 1e9 == pytest.approx(a.total_params_b, rel=0.02)


def test_catalog_numbers_spot_checks():
    q = MODELS["Qwen3-30B-A3B"]
    assert (q.num_experts, q.num_experts_per_tok, q.moe_intermediate_size) == (128, 8, 768)
    d = MODELS["DeepSeek-V2-Lite"]
    assert (d.kv_lora_rank, d.qk_rope_head_dim, d.num_layers) == (512, 64, 27)
    g = MODELS["gemma-3-27b-it"]
    assert (g.num_layers, g.num_sliding_layers, g.sliding_window) == (62, 52, 1024)
    assert MODELS["gpt-oss-120b"].num_sliding_layers == 18


# Numbers from openai/gpt-oss-20b config.json (abridged to what the parser reads).
GPT_OSS_20B = {
    "model_type": "gpt_oss",
    "num_hidden_layers": 24,
    "hidden_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2880,
    "vocab_size": 201088,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "experts_per_token": 4,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
}
LLAMA_8B = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
}
# google/gemma-3-27b-it: text_config omits vocab_size and the 5:1 local/global pattern
# (transformers defaults); the parser must supply them.
GEMMA3 = {
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 62,
        "hidden_size": 5376,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "intermediate_size": 21504,
        "sliding_window": 1024,
        "query_pre_attn_scalar": 168,
    },
}
DSV2_LITE = {
    "model_type": "deepseek_v2",
    "num_hidden_layers": 27,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "intermediate_size": 10944,
    "vocab_size": 102400,
    "n_routed_experts": 64,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 1408,
    "n_shared_experts": 2,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "q_lora_rank": None,
}
QWEN3_MOE = {
    "model_type": "qwen3_moe",
    "num_hidden_layers": 48,
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 6144,
    "vocab_size": 151936,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 768,
    "mlp_only_layers": [],
    "sliding_window": None,
    "use_sliding_window": False,
}


@pytest.mark.parametrize(
    "cfg,catalog",
    [
        (GPT_OSS_20B, "gpt-oss-20b"),
        (LLAMA_8B, "Llama-3.1-8B"),
        (GEMMA3, "gemma-3-27b-it"),
        (DSV2_LITE, "DeepSeek-V2-Lite"),
        (QWEN3_MOE, "Qwen3-30B-A3B"),
    ],
)
def test_from_hf_config_matches_catalog(cfg, catalog):
    a = from_hf_config(cfg, name="x")
    c = MODELS[catalog]
    for f in (
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "num_kv_heads",
        "intermediate_size",
        "vocab_size",
        "num_experts",
        "num_experts_per_tok",
        "kv_lora_rank",
        "num_sliding_layers",
        "sliding_window",
        "tie_word_embeddings",
    ):
        assert getattr(a, f) == getattr(c, f), f
    # totals from arithmetic: within 2% (gemma's vision tower is not in text_config)
    assert a.total_params_b == pytest.approx(c.total_params_b, rel=0.02)


def test_from_hf_config_missing_key_is_named():
    bad = dict(LLAMA_8B)
    del bad["vocab_size"]
    with pytest.raises(ValueError, match="vocab_size"):
        from_hf_config(bad)
    with pytest.raises(ValueError, match="model_type"):
        from_hf_config({"hidden_size": 1})
    with pytest.raises(ValueError, match="not supported"):
        from_hf_config({**LLAMA_8B, "model_type": "bert"})


def test_resolve_arch_from_config_path(tmp_path):
    d = tmp_path / "my-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA_8B))
    assert resolve_arch(str(d)).name == "my-llama"
    assert resolve_arch(str(d / "config.json")).num_layers == 32
    with pytest.raises(ValueError, match="does not exist"):
        resolve_arch(str(tmp_path / "nope.json"))


# microsoft/phi-4 config.json (abridged): fused qkv/gate_up in the checkpoint, same counts.
PHI4 = {
    "model_type": "phi3",
    "num_hidden_layers": 40,
    "hidden_size": 5120,
    "num_attention_heads": 40,
    "num_key_value_heads": 10,
    "intermediate_size": 17920,
    "vocab_size": 100352,
    "max_position_embeddings": 16384,
    "sliding_window": None,
    "tie_word_embeddings": False,
}
QWEN25_7B = {
    "model_type": "qwen2",
    "num_hidden_layers": 28,
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "sliding_window": 131072,
    "use_sliding_window": False,
    "max_window_layers": 28,
    "tie_word_embeddings": False,
}
MISTRAL_V01 = {  # Mistral-7B-v0.1 slides every layer over 4096 tokens
    "model_type": "mistral",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 32000,
    "sliding_window": 4096,
}


def test_from_hf_config_other_families():
    phi = from_hf_config(PHI4, "phi")
    assert phi.total_params_b == pytest.approx(MODELS["phi-4"].total_params_b, rel=0.01)
    assert phi.num_sliding_layers == 0 and phi.head_dim == 128
    q = from_hf_config(QWEN25_7B, "q")
    assert q.num_sliding_layers == 0  # use_sliding_window false: the window is not used
    assert q.total_params_b == pytest.approx(7.62, rel=0.01)
    m = from_hf_config(MISTRAL_V01, "m")
    assert (m.num_sliding_layers, m.sliding_window) == (32, 4096)


# ---- the catalogs as data: YAML rows in the package, one schema ---------------------------

from planner.catalog.schema import GpuCatalog, ModelCatalog, load_catalog, parse_catalog  # noqa: E402
from planner.errors import InputError  # noqa: E402


def _packaged(name: str) -> dict:
    return yaml.safe_load(resources.files("planner.catalog").joinpath(name).read_text())


def test_catalogs_are_package_data_with_one_row_per_entry():
    gpus, models = _packaged("gpus.yaml"), _packaged("models.yaml")
    assert [g["name"] for g in gpus["gpus"]] == list(GPUS)
    assert [m["name"] for m in models["models"]] == list(MODELS)
    assert load_catalog("gpus").gpus[0].name == next(iter(GPUS))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_row_cites_its_config_json(name):
    assert MODELS[name].source.startswith("https://huggingface.co/")
    assert MODELS[name].source.endswith("/config.json")
    assert MODELS[name].hf_repo in MODELS[name].source


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_gpu_row_names_its_source(name):
    src = GPUS[name].source
    assert src and src != "inline"
    if name != "cpu":
        assert "https://" in src or "github.com/" in src, src


def _gpu_doc(**extra) -> dict:
    row = dict(
        name="RTX-5090",
        arch="blackwell",
        memory_gib=31.36,
        memory_bandwidth_gbps=1792,
        bf16_tflops=209.5,
        fp16_tflops=209.5,
        source="NVIDIA RTX Blackwell GPU Architecture whitepaper",
    )
    return {"gpus": [*_packaged("gpus.yaml")["gpus"], {**row, **extra}]}


def test_adding_a_gpu_is_a_data_change():
    cat = parse_catalog(yaml.safe_dump(_gpu_doc()), GpuCatalog, "gpus.yaml")
    assert cat.gpus[-1].name == "RTX-5090" and len(cat.gpus) == len(GPUS) + 1


@pytest.mark.parametrize(
    "extra,path,msg",
    [
        ({"source": ""}, "gpus[17].source", "must name its source"),
        ({"source": "inline"}, "gpus[17].source", "must name its source"),
        ({"name": "l40s"}, "(top level)", "appears twice"),
        ({"memory_gb": 32}, "gpus[17].memory_gb", "Extra inputs"),
        ({"memory_gib": -1}, "gpus[17].memory_gib", "greater than 0"),
    ],
)
def test_catalog_schema_rejects_bad_rows_naming_file_and_field(extra, path, msg):
    with pytest.raises(InputError) as e:
        parse_catalog(yaml.safe_dump(_gpu_doc(**extra)), GpuCatalog, "gpus.yaml")
    assert str(e.value).startswith(f"gpus.yaml: {path}: ")
    assert msg in str(e.value) and e.value.fix


def test_model_catalog_rejects_an_alias_used_twice():
    doc = _packaged("models.yaml")
    doc["models"][1]["aliases"] = ["Meta-Llama-3.1-8B-Instruct"]
    with pytest.raises(InputError, match="appears twice"):
        parse_catalog(yaml.safe_dump(doc), ModelCatalog, "models.yaml")


# MiniMaxAI/MiniMax-M2.5 config.json (the MiniMax-M2 architecture), abridged to what the parser reads
MINIMAX_M25 = {
    "model_type": "minimax_m2",
    "vocab_size": 200064,
    "hidden_size": 3072,
    "intermediate_size": 1536,
    "num_hidden_layers": 62,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 196608,
    "num_local_experts": 256,
    "num_experts_per_tok": 8,
    "tie_word_embeddings": False,
}
# moonshotai/Kimi-K2.5 config.json, abridged: a DeepSeek-V3 (MLA) language model in text_config
KIMI_K25 = {
    "model_type": "kimi_k25",
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "deepseek_v3",
        "vocab_size": 163840,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "n_routed_experts": 384,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 1,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "max_position_embeddings": 262144,
    },
}


@pytest.mark.parametrize("cfg,catalog", [(MINIMAX_M25, "MiniMax-M2.5"), (KIMI_K25, "Kimi-K2.5")])
def test_new_rows_match_their_config_json(cfg, catalog):
    a, c = from_hf_config(cfg, name="x"), MODELS[catalog]
    same = set(c.model_dump()) - {"name", "hf_repo", "family", "source", "total_params_b"}
    for f in sorted(same - {"active_params_b"}):
        assert getattr(a, f) == getattr(c, f), f
    assert a.active_params_b == pytest.approx(c.active_params_b, rel=0.01)
    assert a.total_params_b == pytest.approx(c.total_params_b, rel=0.01)
    assert c.is_moe and (c.is_mla == (catalog == "Kimi-K2.5"))
