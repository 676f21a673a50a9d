"""The example inputs (`planner example NAME -o DIR`): a ready-to-use set of input files.

`cpu` is the development path without a GPU: one node whose only "GPU" is the CPU, two tiny
random-weight Llama models (built into DIR/models/ on the spot, nothing downloaded) that the
CPU build of vLLM serves; other YAML files kept in `plans/examples/cpu/` (the workload spec)
are copied too. Other names (`lab16`) copy `plans/examples/NAME/`.
Variant paths in models.yaml are relative to the models file.

The examples ship inside the package (`plans/examples/` is the package `planner.examples`,
see pyproject.toml) and are read with importlib.resources, so an installed wheel has them.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import yaml

from planner.errors import InputError
from planner.tinymodel import tiny_arch


def examples_dir() -> Traversable:
    """The bundled examples: `plans/examples/` in a checkout, package data in a wheel."""
    return files("planner.examples")


def example_names() -> list[str]:
    """Names `planner example` accepts."""
    return sorted({"cpu", *(p.name for p in examples_dir().iterdir() if _is_example(p))})


def _is_example(p: Traversable) -> bool:
    return p.is_dir() and any(f.name.endswith(".yaml") for f in p.iterdir())


CPU_CLUSTER = """\
# One machine without a GPU: vLLM's CPU build serves tiny models (development and CI).
kind: cluster
version: 1
name: cpu-dev
nodes:
  - name: local
    address: 127.0.0.1
    cpu_memory_gib: 16
    gpus:
      - {type: cpu, count: 1}
"""

# Inline architecture: the numbers of planner.tinymodel.build_tiny_model's defaults.
_TINY_ARCH = yaml.safe_dump(
    tiny_arch(), default_flow_style=True, sort_keys=False, width=1000
).strip()

CPU_MODELS = f"""\
# Two tiny random-weight Llamas (built by `planner example cpu`); paths are relative to this file.
kind: models
version: 1
models:
  - name: tiny-a
    architecture: {_TINY_ARCH}
    max_context: 2048
    priority: 2
    variants:
      - {{name: bf16, quantization: bf16, path: models/tiny-a}}
  - name: tiny-b
    architecture: {_TINY_ARCH}
    max_context: 2048
    priority: 1
    variants:
      - {{name: bf16, quantization: bf16, path: models/tiny-b}}
"""

CPU_SLO = """\
# Targets a CPU can meet with tiny models; a switch is a process start there (no sleep mode).
kind: slo
version: 1
default:
  ttft_p95_s: 1.0
  tpot_p95_s: 0.1
  switch_p95_s: 60.0
attainment: 0.9
"""

CPU_FILES = {"cluster.yaml": CPU_CLUSTER, "models.yaml": CPU_MODELS, "slo.yaml": CPU_SLO}
# model name -> seed of its random weights (different seeds: different models)
CPU_MODEL_SEEDS = {"tiny-a": 0, "tiny-b": 1}


def write_cpu_example(out_dir: Path, *, build_models: bool = True) -> list[Path]:
    """Write the cpu example's YAML files and build its tiny models; returns the paths written."""
    from planner.io import atomic_write_text

    written = []
    for name, text in CPU_FILES.items():
        atomic_write_text(out_dir / name, text)
        written.append(out_dir / name)
    src = examples_dir() / "cpu"  # more inputs kept beside them (workload.yaml)
    for f in sorted(src.iterdir(), key=lambda f: f.name):
        if f.name.endswith(".yaml") and f.name not in CPU_FILES:
            atomic_write_text(out_dir / f.name, f.read_text(encoding="utf-8"))
            written.append(out_dir / f.name)
    if build_models:
        from planner.tinymodel import build_tiny_model

        for model, seed in CPU_MODEL_SEEDS.items():
            written.append(build_tiny_model(out_dir / "models" / model, seed=seed))
    return written


def write_one_instance_plan(
    d: Path, port: int, *, point: str = "p", engine: dict[str, object] | None = None
) -> Path:
    """The cpu example's inputs with tiny-a only (the plan check refuses a point that leaves
    a model of the models file out) and `plan.yaml`: one point of one host-tier instance of
    tiny-a on `port` (`engine`: more engine settings). The gateway's tests and bench."""
    import yaml

    for name, text in CPU_FILES.items():
        (d / name).write_text(text)
    models = yaml.safe_load((d / "models.yaml").read_text())
    models["models"] = [m for m in models["models"] if m["name"] == "tiny-a"]
    (d / "models.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
    inst = {
        "id": "tiny-a-0",
        "model": "tiny-a",
        "variant": "bf16",
        "node": "local",
        "gpus": [0],
        "tier": "host",
        "port": port,
        "memory_gib": {"weights": 0.01, "kv": 1.0, "overhead": 0.1},
        "engine": {"max_model_len": 1024, "max_num_seqs": 8, **(engine or {})},
    }
    plan = {
        "kind": "plan",
        "version": 1,
        "selected": point,
        "inputs": {"cluster": {"path": "cluster.yaml"}, "models": {"path": "models.yaml"}},
        "points": [{"name": point, "instances": [inst]}],
    }
    (d / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    return d / "plan.yaml"


def write_example(name: str, out: Path, *, build_models: bool = True) -> list[Path]:
    """Write example NAME into `out` (cpu: with its tiny models unless `build_models` is
    False); returns the paths written. An unknown name is an InputError before any write."""
    from planner.io import atomic_write_text

    if name == "cpu":
        return write_cpu_example(out, build_models=build_models)
    if name not in example_names():
        raise InputError(
            f"no example named {name!r}", path="NAME", fix=f"use one of {example_names()}"
        )
    written = []
    for f in sorted((examples_dir() / name).iterdir(), key=lambda f: f.name):
        if f.name.endswith((".yaml", ".md")):
            atomic_write_text(out / f.name, f.read_text(encoding="utf-8"))
            written.append(out / f.name)
    return written
