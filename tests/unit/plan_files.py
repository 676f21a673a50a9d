"""Plan files for CLI tests: the golden small plan (tests/golden/plan_small.yaml) with absolute
input paths, and a one-instance plan of a tiny model on the CPU example cluster."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from planner.app.example import CPU_CLUSTER
from planner.tinymodel import tiny_arch

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "small"
GOLDEN = yaml.safe_load((ROOT / "tests" / "golden" / "plan_small.yaml").read_text())


def golden_small_plan(tmp_path: Path, edit=None, name: str = "plan.yaml") -> Path:
    """The golden small plan with absolute input paths, after `edit(points)`."""
    doc = copy.deepcopy(GOLDEN)
    for k in ("cluster", "models", "slo", "workload"):
        doc["inputs"][k]["path"] = str(SMALL / f"{k}.yaml")
    if edit is not None:
        edit(doc["points"])
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


# the architecture of the tiny CPU model (what plans/examples/cpu/models.yaml describes)
TINY_ARCH = tiny_arch()


def tiny_cpu_plan(tmp_path, node: str = "local", models_path: str = "models.yaml") -> str:
    """A one-instance plan of a tiny model on `node`, its cluster and models files beside it."""
    (tmp_path / "cluster.yaml").write_text(CPU_CLUSTER)
    models = {
        "kind": "models",
        "models": [
            {
                "name": "tiny-a",
                "architecture": TINY_ARCH,
                "variants": [{"name": "bf16", "quantization": "bf16", "path": "models/tiny-a"}],
            }
        ],
    }
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(models))
    inst = {
        "id": "a-0",
        "model": "tiny-a",
        "variant": "bf16",
        "node": node,
        "gpus": [0],
        "memory_gib": {"weights": 0.01, "kv": 1, "overhead": 0.1},
        "port": 18555,
    }
    plan = {
        "kind": "plan",
        "selected": "p",
        "points": [{"name": "p", "instances": [inst]}],
        "inputs": {"cluster": {"path": "cluster.yaml"}, "models": {"path": models_path}},
    }
    p = tmp_path / "plan.yaml"
    p.write_text(yaml.safe_dump(plan))
    return str(p)
