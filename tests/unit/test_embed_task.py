"""`task: embed` in the models file: the model's instances run vLLM as an embedding model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.errors import PlannerError
from planner.optimizer import baselines
from planner.schemas import load_cluster, load_models

SMALL = Path(__file__).resolve().parents[1] / "data" / "small"


def _models(tmp_path: Path, task: str) -> Path:
    doc = yaml.safe_load((SMALL / "models.yaml").read_text())
    doc["models"][2]["task"] = task  # summarizer-8b
    out = tmp_path / "models.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def test_an_embedding_models_instances_carry_the_pooling_runner(tmp_path):
    models = load_models(_models(tmp_path, "embed"))
    assert [m.task for m in models.models][:3] == ["generate", "generate", "embed"]
    cluster = load_cluster(SMALL / "cluster.yaml")
    for build in (baselines.static, baselines.lru):
        insts = build(cluster, models).point.instances
        args = {i.model: i.engine.extra_args for i in insts}
        assert args["summarizer-8b"] == ["--runner", "pooling"], build.__name__
        assert args["planner-7b"] == [], build.__name__


def test_an_unknown_task_names_the_choices(tmp_path):
    with pytest.raises(PlannerError) as e:
        load_models(_models(tmp_path, "embedding"))
    assert "task" in str(e.value) and "embed" in str(e.value)
