"""`planner example cpu` and the tiny model it builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.app.example import CPU_FILES
from planner.cli.main import main
from planner.schemas import load_cluster, load_models, load_slo
from planner.tinymodel import MARKER, build_tiny_model, is_built

REPO_EXAMPLE = Path(__file__).resolve().parents[2] / "plans" / "examples" / "cpu"


def test_repo_example_files_match_the_command() -> None:
    for name, text in CPU_FILES.items():
        assert (REPO_EXAMPLE / name).read_text() == text, name


def test_example_cpu_writes_valid_inputs(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as ei:
        main(["example", "cpu", "-o", str(tmp_path), "--no-models", "--json"])
    assert ei.value.code == 0
    out = json.loads(capsys.readouterr().out)
    names = sorted(Path(f).name for f in out["files"])
    assert names == sorted(p.name for p in REPO_EXAMPLE.glob("*.yaml"))
    assert {"cluster.yaml", "models.yaml", "slo.yaml"} <= set(names)
    cluster = load_cluster(tmp_path / "cluster.yaml")
    assert cluster.nodes[0].name == "local" and cluster.gpu_count == 1
    models = load_models(tmp_path / "models.yaml")
    assert models.names == ["tiny-a", "tiny-b"]
    assert models.model("tiny-a").variant("bf16").path == "models/tiny-a"
    assert models.model("tiny-a").arch.hidden_size == 128
    load_slo(tmp_path / "slo.yaml")


def test_unknown_example_exits_2(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as ei:
        main(["example", "no-such-example", "-o", str(tmp_path)])
    assert ei.value.code == 2


def test_tiny_model_is_deterministic_idempotent_and_atomic(tmp_path) -> None:
    a = build_tiny_model(tmp_path / "a", seed=3)
    b = build_tiny_model(tmp_path / "b", seed=3)
    for f in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["hidden_size"] == 128 and cfg["num_key_value_heads"] == 2
    assert (
        json.loads((a / "tokenizer_config.json").read_text()).get("chat_template")
        or (a / "chat_template.jinja").exists()
    )
    stamp = (a / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(tmp_path / "a", seed=3) == a  # reused, not rebuilt
    assert (a / "model.safetensors").stat().st_mtime_ns == stamp
    params = json.loads((a / MARKER).read_text())
    assert is_built(a, params) and not is_built(a, {**params, "seed": 4})
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no leftovers
