"""One plan check for every command that reads a plan (issue 16, items 4-8).

Each case edits the golden small plan the way a person (or a bad merge) would, then runs
the commands that read plans: every one exits 2 naming the file, the field and a fix,
before any side effect (no state dir is created).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli_one_line
from plan_files import GOLDEN, SMALL, golden_small_plan


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "trace.csv"
    rows = [f"{t},{m},1000,100" for t, m in enumerate(("planner-7b", "coder-32b", "summarizer-8b"))]
    p.write_text("timestamp,model,input_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    return p


def _inst(points, pid: int, iid: str) -> dict:
    return next(i for i in points[pid]["instances"] if i["id"] == iid)


def _always_awake(inst: dict) -> dict:
    """`inst` on the gpu tier: it never sleeps, so its memory is always held."""
    inst["tier"] = "gpu"
    inst.pop("awake_hours", None)
    inst["memory_gib"].pop("asleep", None)
    return inst


def _two_on_a_4090(points):
    """Item 4: 8.7 GiB and 19.7 GiB, both always awake, on one 24 GiB RTX 4090."""
    a, c = (_always_awake(_inst(points, 0, i)) for i in ("planner-7b-0", "coder-32b-0"))
    a.update(node="n1", gpus=[0], port=8200)
    a["memory_gib"] = {"weights": 5.196, "kv": 2.3, "overhead": 1.2}
    a["engine"]["gpu_memory_utilization"] = 0.4
    c.update(node="n1", gpus=[0], tp=1, port=8201)
    c["memory_gib"] = {"weights": 18.0, "kv": 0.5, "overhead": 1.2}
    c["engine"]["gpu_memory_utilization"] = 0.83


def _huge_on_a_4090(points):
    """Item 4: an 82 GiB instance on a 24 GiB GPU."""
    a = _inst(points, 0, "planner-7b-0")
    a.update(node="n1", gpus=[1], port=8200)
    a["memory_gib"] = {"weights": 5.2, "kv": 75.6, "overhead": 1.2}
    a["engine"]["gpu_memory_utilization"] = 0.98


def _utilization_sum(points):
    """Item 4: two always-awake instances at gpu_memory_utilization 0.8 on one L40S."""
    for iid in ("planner-7b-0", "summarizer-8b-0"):
        _always_awake(_inst(points, 0, iid))["engine"]["gpu_memory_utilization"] = 0.8


def _weights_understated(points):
    """Item 4: a plan that claims 1 GiB of weights for a 32B model (the perf model knows)."""
    c = _inst(points, 0, "coder-32b-0")
    c.update(node="n1", gpus=[0], tp=1, port=8201)
    c["memory_gib"] = {"weights": 1.0, "kv": 20.0, "overhead": 1.2}
    c["engine"]["gpu_memory_utilization"] = 0.93


def _tp_no_gpus(points):
    _inst(points, 0, "coder-32b-0")["gpus"] = []


def _tp_same_gpu_twice(points):
    _inst(points, 0, "coder-32b-0")["gpus"] = [0, 0]


def _model_not_served(points):
    m = "summarizer-8b"
    points[1]["instances"] = [i for i in points[1]["instances"] if i["model"] != m]
    # its hand-offs go with it (a hand-off naming it is refused on its own, in test_schemas)
    wakes = points[1].get("handoff", {})
    points[1]["handoff"] = {a: [b for b in bs if b != m] for a, bs in wakes.items() if a != m}


def _context_too_long(points):
    _inst(points, 0, "planner-7b-0")["engine"]["max_model_len"] = 10_000_000


def _kv_below_one_sequence(points):
    """Issue 30 item 1: 0.05 GiB of KV holds ~900 tokens of planner-7b, max_model_len 16384:
    vLLM refuses to start the engine, whatever the GPU's memory."""
    _inst(points, 0, "planner-7b-0")["memory_gib"]["kv"] = 0.05


def _escaping_id(points):
    _inst(points, 0, "planner-7b-0")["id"] = "../../escaped-probe"


def _unknown_node(points):
    _inst(points, 0, "planner-7b-0")["node"] = "n11"


CASES = [
    ("two on a 4090", _two_on_a_4090, "points[0].instances", "GPU n1:0 (RTX-4090"),
    ("82 GiB on a 4090", _huge_on_a_4090, "points[0].instances[0].engine", "less than"),
    ("utilization sum", _utilization_sum, "points[0].instances", "awake together add up to"),
    ("weights understated", _weights_understated, "points[0].instances", "GPU n1:0"),
    ("tp 2 with no gpus", _tp_no_gpus, "points[0].instances[1].gpus", "tp=2 needs 2 GPU ids"),
    ("tp 2 on gpu 0 twice", _tp_same_gpu_twice, "points[0].instances[1]", "listed twice"),
    ("model not served", _model_not_served, "points[1].instances", "no instance of model"),
    (
        "context",
        _context_too_long,
        "points[0].instances[0].engine.max_model_len",
        "exceeds max_context 16384",
    ),
    (
        "kv below one sequence",
        _kv_below_one_sequence,
        "points[0].instances[0].memory_gib.kv",
        "less than one max_model_len sequence",
    ),
    ("escaping id", _escaping_id, "points[0].instances[0].id", "not a safe name"),
    ("unknown node", _unknown_node, "points[0].instances[0].node", "did you mean 'n1'"),
]


def test_the_golden_plan_passes(tmp_path, capsys):
    code, out, _ = run_cli_one_line(["validate", golden_small_plan(tmp_path)], capsys)
    assert code == 0 and "cross" not in out  # checked against its recorded inputs


@pytest.mark.parametrize("edit,path,needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_plan_reading_command_refuses_before_any_side_effect(
    tmp_path, capsys, edit, path, needle
):
    plan, state = golden_small_plan(tmp_path, edit), tmp_path / "state"
    commands = [
        ["validate", plan],
        ["validate", plan, "--cluster", SMALL / "cluster.yaml", "--models", SMALL / "models.yaml"],
        ["apply", plan, "--state-dir", state, "--dry-run", "--node", "n0"],
        ["apply", plan, "--state-dir", state, "--node", "n0"],
        ["explain", plan],
        ["gateway", "--plan", plan, "--state-dir", state, "--port", "1"],
        ["evaluate", plan, "--workload", _trace(tmp_path)],
        ["adjust", "--plan", plan, "--state-dir", state, "--once", "--dry-run"],
    ]
    for argv in commands:
        code, _, err = run_cli_one_line(argv, capsys)
        assert code == 2, (argv[0], err)
        assert f"{plan}: {path}" in err, (argv[0], err)
        assert needle in err and "fix:" in err and "Traceback" not in err, (argv[0], err)
    assert not state.exists()


def test_explain_explains_the_file_not_a_re_solve(tmp_path, capsys):
    """Item 6: the explanation names the GPUs the file gives each model, even edited ones."""

    def move(points):
        s = _always_awake(_inst(points, 0, "summarizer-8b-0"))
        s.update(node="n1", gpus=[1], port=8200)
        s["engine"]["gpu_memory_utilization"] = 0.6

    code, out, err = run_cli_one_line(
        ["explain", golden_small_plan(tmp_path, move), "--json"], capsys
    )
    assert code == 0, err
    by_model = {m["model"]: m for m in json.loads(out)["models"]}
    (placed,) = by_model["summarizer-8b"]["placements"]
    assert placed.startswith("fp8 (fp8) on n1 GPUs [1] [RTX-4090] tp=1 tier=gpu,")
    assert any("GPU n1:1 (RTX-4090" in r for r in by_model["summarizer-8b"]["reasons"])
    coder = by_model["coder-32b"]
    assert coder["placements"][0].startswith("awq (awq) on n0 GPUs [0, 1] [L40S] tp=2")
    assert "shared with planner-7b-0" in " ".join(coder["reasons"])


def _multi_node(points):
    p = _always_awake(_inst(points, 0, "planner-7b-0"))
    p.update(node="n1", gpus=[0], port=8100)
    p["engine"]["gpu_memory_utilization"] = 0.45


def test_apply_local_refuses_a_multi_node_plan_unless_node_is_given(tmp_path, capsys):
    """Item 5: the local backend would start node-c's and node-d's instances on this host."""
    plan, state = golden_small_plan(tmp_path, _multi_node), tmp_path / "state"
    code, _, err = run_cli_one_line(["apply", plan, "--state-dir", state, "--dry-run"], capsys)
    assert code == 2 and "--node:" in err and "2 nodes (n0, n1)" in err and "--backend ray" in err
    code, out, err = run_cli_one_line(
        ["apply", plan, "--state-dir", state, "--dry-run", "--node", "n1", "--json"], capsys
    )
    assert code == 0, err
    assert [a["instance"] for a in json.loads(out)["actions"]] == ["planner-7b-0"]
    assert "note: node n1: 1 of the 3 instances" in err and "others run on n0" in err
    code, _, err = run_cli_one_line(["apply", plan, "--dry-run", "--node", "n9"], capsys)
    assert code == 2 and "no node 'n9' in the cluster" in err
    assert not state.exists()


def test_unsafe_model_name_in_the_models_file(tmp_path, capsys):
    """Item 8: a model named like a path does not pass validate."""
    text = (
        (SMALL / "models.yaml").read_text().replace("name: planner-7b", "name: ../../outside/evil")
    )
    f = tmp_path / "models.yaml"
    f.write_text(text)
    code, _, err = run_cli_one_line(["validate", f], capsys)
    assert code == 2 and "models[0].name" in err and "not a safe name" in err


def test_a_request_over_the_context_is_refused_by_reason(tmp_path, capsys):
    """Item 9: a 10-million-token prompt is read, and counted as refused (vLLM would refuse it)."""
    t = tmp_path / "trace.csv"
    t.write_text(
        "timestamp,model,input_tokens,output_tokens\n"
        "0,planner-7b,1000,100\n1,planner-7b,10000000,100\n2,coder-32b,16384,5\n"
        "3,summarizer-8b,16383,1\n"
    )
    code, out, err = run_cli_one_line(
        ["evaluate", golden_small_plan(tmp_path), "--workload", t, "--json"], capsys
    )
    assert code == 0, err
    m = json.loads(out)["points"][GOLDEN["selected"]]
    assert m["refused"] == {"over_context": 2, "refused_queue_full": 0, "no_instance": 0}
    assert m["per_model"]["planner-7b"]["refused"]["over_context"] == 1
    assert m["slo_attainment"] <= 0.5  # a refused request never meets its SLO
