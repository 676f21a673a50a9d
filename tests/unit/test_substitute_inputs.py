"""Declared stand-ins in models.yaml (issue 17 item 1), checked by `planner validate` as a user
runs it: each bad declaration exits 2 with `error:` naming the file and the field, and a `fix:`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
LAB16_MODELS = ROOT / "plans" / "examples" / "lab16" / "models.yaml"


def _run(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return int(e.value.code or 0), " ".join((out.out + out.err).split())


def _models(tmp_path: Path, declare: dict[str, dict]) -> Path:
    """lab16's models.yaml with `declare` (model -> keys) merged into its entries."""
    data = yaml.safe_load(LAB16_MODELS.read_text())
    for m in data["models"]:
        m.update(declare.get(m["name"], {}))
    f = tmp_path / "models.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    return f


def _sub(model: str, **kw) -> dict:
    return {"substitute_when": "always_while_waking", "substitutes": [{"model": model, **kw}]}


# lab16: planner-7b 1st, coder-32b 2nd, reasoner-30b 3rd, reviewer-14b 4th, summarizer-8b 5th
BAD = {
    "unknown model": (
        {"reviewer-14b": _sub("coder-33b")},
        "models[3].substitutes[0].model",
        ["'coder-33b'", "did you mean 'coder-32b'"],
    ),
    "unknown variant": (
        {"reviewer-14b": _sub("coder-32b", variant="int8")},
        "models[3].substitutes[0].variant",
        ["no variant 'int8'", "'awq'"],
    ),
    "itself": (
        {"reviewer-14b": _sub("reviewer-14b")},
        "models[3].substitutes",
        ["cycle", "reviewer-14b -> reviewer-14b"],
    ),
    "two-model cycle": (
        {"reviewer-14b": _sub("coder-32b"), "coder-32b": _sub("reviewer-14b")},
        "models[1].substitutes",
        ["cycle", "coder-32b -> reviewer-14b -> coder-32b"],
    ),
    "three-model cycle": (
        {
            "planner-7b": _sub("coder-32b"),
            "coder-32b": _sub("reasoner-30b"),
            "reasoner-30b": _sub("planner-7b"),
        },
        "models[0].substitutes",
        ["cycle", "planner-7b -> coder-32b -> reasoner-30b -> planner-7b"],
    ),
    "shorter context": (
        {"summarizer-8b": _sub("planner-7b")},  # 65536 tokens, planner-7b holds 32768
        "models[4].substitutes[0].model",
        ["32768 tokens", "max_context 65536", "max_context >= 65536"],
    ),
    "penalty out of range": (
        {"reviewer-14b": _sub("coder-32b", quality_penalty=1.5)},
        "models[3].substitutes[0].quality_penalty",
        ["less than or equal to 1"],
    ),
    "unknown setting": (
        {"reviewer-14b": {**_sub("coder-32b"), "substitute_when": "sometimes"}},
        "models[3].substitute_when",
        ["wake_exceeds_slo"],
    ),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_stand_ins_are_refused(tmp_path, capsys, case):
    declare, field, needles = BAD[case]
    f = _models(tmp_path, declare)
    code, err = _run(["validate", f], capsys)
    assert code == 2, err
    assert f"{f}:" in err and field in err and "fix:" in err, err
    assert "Traceback" not in err, err
    for n in needles:
        assert n in err, err


def test_good_stand_ins_pass(tmp_path, capsys):
    """A chain without a loop, a named variant, a longer-context stand-in: all accepted."""
    f = _models(
        tmp_path,
        {
            "reviewer-14b": _sub("coder-32b", variant="awq", quality_penalty=0.05),
            "coder-32b": _sub("summarizer-8b", quality_penalty=0.3),
            "planner-7b": {**_sub("summarizer-8b"), "substitute_when": "wake_exceeds_slo"},
        },
    )
    code, err = _run(["validate", f], capsys)
    assert code == 0, err
