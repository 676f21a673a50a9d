"""The CPU example's inputs cut to the tiny model `tiny-a`, and a plan of one host-tier
instance of it: what the gateway bench and the gateway key tests serve."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_tiny_plan(d: Path, port: int, *, point: str, **engine: object) -> Path:
    """Write cluster.yaml, models.yaml (tiny-a only: the plan check refuses a point that leaves
    a model of the models file out) and plan.yaml (point `point`, the instance on `port`, its
    engine settings plus `engine`) into `d`; return the plan's path."""
    from planner.cli.example import CPU_FILES

    for name, text in CPU_FILES.items():
        (d / name).write_text(text)
    models = yaml.safe_load((d / "models.yaml").read_text())
    models["models"] = [m for m in models["models"] if m["name"] == "tiny-a"]
    (d / "models.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
    inst = {
        "id": "tiny-a-0", "model": "tiny-a", "variant": "bf16", "node": "local", "gpus": [0],
        "tier": "host", "port": port, "memory_gib": {"weights": 0.01, "kv": 1.0, "overhead": 0.1},
        "engine": {"max_model_len": 1024, "max_num_seqs": 8, **engine},
    }  # fmt: skip
    plan = {
        "kind": "plan", "version": 1, "selected": point,
        "inputs": {"cluster": {"path": "cluster.yaml"}, "models": {"path": "models.yaml"}},
        "points": [{"name": point, "instances": [inst]}],
    }  # fmt: skip
    (d / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    return d / "plan.yaml"
