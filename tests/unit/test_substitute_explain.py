"""`planner explain` says which model relies on which stand-in (issue 17 item 3), from the
point's own `substitutes` as the plan file holds them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from planner.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "small"
GOLDEN = yaml.safe_load((ROOT / "tests" / "golden" / "plan_small.yaml").read_text())


def _plan(tmp_path: Path, substitutes: dict, asleep: tuple[str, ...] = ()) -> Path:
    """The golden small plan, its first point with `substitutes` and the instances in `asleep`
    kept awake in no hour."""
    doc = copy.deepcopy(GOLDEN)
    for k in ("cluster", "models", "slo", "workload"):
        doc["inputs"][k]["path"] = str(SMALL / f"{k}.yaml")
    doc["selected"] = doc["points"][0]["name"]
    doc["points"][0]["substitutes"] = substitutes
    for inst in doc["points"][0]["instances"]:
        if inst["id"] in asleep:
            inst["awake_hours"] = []
    p = tmp_path / "plan.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def _explain(plan: Path, capsys, *extra) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(["explain", str(plan), *extra])
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out + out.err


def test_explain_names_stand_ins_both_ways(tmp_path, capsys):
    plan = _plan(
        tmp_path,
        {
            "summarizer-8b": {
                "when": "wake_exceeds_slo",
                "max_wait_s": 20.0,
                "to": [{"model": "planner-7b", "variant": "awq", "quality_penalty": 0.05}],
            }
        },
        asleep=("summarizer-8b-0",),
    )
    code, out = _explain(plan, capsys, "--json")
    assert code == 0, out
    by = {m["model"]: m for m in json.loads(out)["models"]}
    (kept, relies) = by["summarizer-8b"]["stand_ins"]
    assert "kept awake in no hour" in kept
    assert "relies on stand-in planner-7b (awq) when its wake would exceed 20 s" in relies
    assert "quality penalty 0.05" in relies and "awake here in hours 7-19" in relies
    assert by["planner-7b"]["stand_ins"] == [
        "stands in for summarizer-8b (its awq instances) while summarizer-8b wakes "
        "(quality penalty 0.05)"
    ]
    assert by["coder-32b"]["stand_ins"] == []
    code, out = _explain(plan, capsys)  # the text form says the same
    assert code == 0 and "relies on stand-in planner-7b (awq)" in " ".join(out.split())


def test_explain_says_when_a_stand_in_cannot_answer(tmp_path, capsys):
    plan = _plan(
        tmp_path,
        {
            "coder-32b": {
                "when": "always_while_waking",
                "wake": False,
                "to": [{"model": "planner-7b", "variant": "bf16"}],  # the point runs awq
            }
        },
    )
    code, out = _explain(plan, capsys, "--json")
    assert code == 0, out
    (relies,) = {m["model"]: m for m in json.loads(out)["models"]}["coder-32b"]["stand_ins"]
    assert "whenever it must wake" in relies
    assert "has no instance in this point: it cannot stand in" in relies
    assert "does not wake" in relies
