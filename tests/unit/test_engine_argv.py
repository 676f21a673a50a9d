"""Golden tests of `planner.engines.vllm` argv (regenerate: UPDATE_GOLDEN=1 pytest this file)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from planner.engines.vllm import ENGINE as VLLM
from planner.schemas.plan import Instance

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "argv"
MEM = {"weights": 9.1, "kv": 12.0, "overhead": 1.5}

CASES: dict[str, tuple[dict, str]] = {
    "cuda_gpu_tier_tp2_awq": (
        {
            "id": "coder-32b-0",
            "model": "coder-32b",
            "variant": "awq",
            "node": "node-a",
            "gpus": [0, 1],
            "tp": 2,
            "tier": "gpu",
            "memory_gib": MEM,
            "port": 8101,
            "engine": {
                "gpu_memory_utilization": 0.47,
                "max_model_len": 32768,
                "max_num_seqs": 32,
                "kv_cache_dtype": "auto",
                "quantization": "awq",
            },
        },
        "cuda",
    ),
    "cuda_host_tier_offload_fp8kv": (
        {
            "id": "moe-0",
            "model": "moe",
            "variant": "fp8",
            "node": "node-b",
            "gpus": [3],
            "tp": 1,
            "tier": "host",
            "memory_gib": MEM,
            "port": 8102,
            "kv_cpu_offload_gib": 16,
            "expert_cpu_offload_gib": 10.5,
            "engine": {
                "gpu_memory_utilization": 0.9,
                "max_model_len": 8192,
                "max_num_seqs": 16,
                "kv_cache_dtype": "fp8",
                "quantization": "fp8",
                "max_num_batched_tokens": 4096,
                "extra_args": ["--seed", "0"],
            },
        },
        "cuda",
    ),
    "cuda_disk_tier_bf16": (
        {
            "id": "sum-7b-0",
            "model": "sum-7b",
            "variant": "bf16",
            "node": "node-a",
            "gpus": [2],
            "tp": 1,
            "tier": "disk",
            "memory_gib": MEM,
            "port": 8103,
            "engine": {"quantization": "bf16", "enforce_eager": True},
        },
        "cuda",
    ),
    "cpu_tiny": (
        {
            "id": "tiny-a-0",
            "model": "tiny-a",
            "variant": "bf16",
            "node": "local",
            "gpus": [0],
            "tp": 1,
            "tier": "host",
            "port": 8201,
            "memory_gib": {"weights": 0.01, "kv": 0.5, "overhead": 0.1},
            "engine": {"max_model_len": 1024, "max_num_seqs": 8, "enforce_eager": True},
        },
        "cpu",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_argv_matches_golden(name: str) -> None:
    spec, device = CASES[name]
    inst = Instance.model_validate(spec)
    argv, env = VLLM.build_argv(
        inst,
        model_path=f"/models/{inst.model}",
        served_name=inst.model,
        python="python",
        device=device,  # type: ignore[arg-type]
    )
    got = {"argv": argv, "env": env}
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1) + "\n")
    assert path.exists(), f"missing golden file {path}; run with UPDATE_GOLDEN=1"
    assert got == json.loads(path.read_text())


def test_argv_is_pure_and_flag_values_pair_up() -> None:
    spec, _ = CASES["cuda_host_tier_offload_fp8kv"]
    inst = Instance.model_validate(spec)
    a1 = VLLM.build_argv(inst, model_path="/m", served_name="moe", python="py")
    a2 = VLLM.build_argv(inst, model_path="/m", served_name="moe", python="py")
    assert a1 == a2
    argv, env = a1
    assert argv[argv.index("--cpu-offload-gb") + 1] == "10.5"  # per GPU, tp=1
    assert argv[argv.index("--kv-offloading-size") + 1] == "16"
    assert "--enable-sleep-mode" in argv and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert argv[-2:] == ["--seed", "0"]  # extra args last, verbatim


def test_cpu_has_no_gpu_flags_and_whole_gib_kv() -> None:
    spec, _ = CASES["cpu_tiny"]
    argv, env = VLLM.build_argv(
        Instance.model_validate(spec), model_path="/m", served_name="t", device="cpu"
    )
    for flag in ("--enable-sleep-mode", "--gpu-memory-utilization", "--cpu-offload-gb"):
        assert flag not in argv
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    big = {**spec, "memory_gib": {"weights": 0, "kv": 2.2, "overhead": 0}}
    _, env = VLLM.build_argv(
        Instance.model_validate(big), model_path="/m", served_name="t", device="cpu"
    )
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "3"


def test_tp_splits_expert_offload_per_gpu() -> None:
    spec = {**CASES["cuda_gpu_tier_tp2_awq"][0], "expert_cpu_offload_gib": 8}
    argv, _ = VLLM.build_argv(Instance.model_validate(spec), model_path="/m", served_name="c")
    assert argv[argv.index("--cpu-offload-gb") + 1] == "4"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
