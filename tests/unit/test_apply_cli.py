"""`planner apply --dry-run`, `status`, `down` and input checks, without starting servers."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli
from plan_files import tiny_cpu_plan

from planner.app.example import CPU_CLUSTER


def test_dry_run_plans_without_side_effects(tmp_path, capsys) -> None:
    plan, state = tiny_cpu_plan(tmp_path), tmp_path / "state"
    code, out, _ = run_cli(
        ["apply", plan, "--state-dir", str(state), "--dry-run", "--json"], capsys
    )
    assert code == 0
    data = json.loads(out)
    assert data["point"] == "p"
    assert data["actions"][0] | {"detail": ""} == {
        "action": "start",
        "instance": "a-0",
        "node": "local",
        "result": "planned",
        "detail": "",
    }
    assert data["instances"][0]["status"] == "stopped"
    code, out, _ = run_cli(["apply", plan, "--state-dir", str(state), "--dry-run"], capsys)
    assert code == 0 and "planned actions" in out and "a-0" in out
    # a dry run creates no state dir: status says so (exit 2) instead of "nothing applied"
    code, _, err = run_cli(["status", "--state-dir", str(state), "--json"], capsys)
    assert code == 2 and str(state) in err and "does not exist" in err
    assert not state.exists()
    code, _, err = run_cli(["down", "--state-dir", str(state)], capsys)
    assert code == 2 and "does not exist" in err and not state.exists()  # issue 42: was 0


@pytest.mark.parametrize(
    ("kw", "args", "needle"),
    [
        ({"node": "elsewhere"}, [], "node 'elsewhere' is not in the cluster"),
        ({"models_path": "missing.yaml"}, [], "models file"),
        ({}, ["--point", "nope"], "no point 'nope'"),
        ({}, ["--backend", "k8s"], "'k8s' is not one of 'local', 'ray'"),
    ],
)
def test_bad_inputs_exit_2_before_side_effects(tmp_path, capsys, kw, args, needle) -> None:
    plan, state = tiny_cpu_plan(tmp_path, **kw), tmp_path / "state"
    code, _, err = run_cli(["apply", plan, "--state-dir", str(state), *args], capsys)
    assert code == 2 and needle in err
    assert not state.exists()


def test_open_controller_for_the_gateway(tmp_path) -> None:
    from planner.app.apply import open_controller

    c = open_controller(tiny_cpu_plan(tmp_path), None, state_dir=tmp_path / "state")
    try:
        assert c.point.name == "p" and not c.supports_sleep  # the cpu cluster: no sleep mode
        assert c.status() == {"a-0": ("stopped", None)}
        assert c.resolve(c.instance("a-0")).endswith("models/tiny-a")
    finally:
        c.state.close()


def test_status_table_and_down_forget_dead_rows(tmp_path, capsys) -> None:
    from planner.adjuster.state import InstanceRow, StateStore

    state = tmp_path / "state"
    with StateStore(state) as s:
        s.upsert(
            InstanceRow(
                id="a-0",
                model="tiny-a",
                variant="bf16",
                node="local",
                port=18555,
                status="awake",
                pid=2**22 + 7,
                started_at=1.0,
            )
        )
        s.set_meta(point="p", plan_path="/x/plan.yaml")
    code, out, err = run_cli(["status", "--state-dir", str(state)], capsys)
    # issue 42: an instance that failed makes `status` exit 1 (before: 0)
    assert code == 1 and "point p" in out and "18555" in out and "failed: a-0" in err
    code, out, _ = run_cli(["status", "--state-dir", str(state), "--json"], capsys)
    row = json.loads(out)["instances"][0]
    assert code == 1 and row["status"] == "failed"
    assert row["healthy"] is False and row["uptime_s"] is None  # no such process
    code, out, _ = run_cli(["down", "--state-dir", str(state), "--json"], capsys)
    assert code == 0 and [a["instance"] for a in json.loads(out)["actions"]] == ["a-0"]
    with StateStore(state) as s:
        assert s.instances() == [] and s.journal_entries()[-1]["detail"] == "down"


def test_status_lists_planned_instances_without_a_process(tmp_path, capsys) -> None:
    from planner.adjuster.state import StateStore

    plan, state = tiny_cpu_plan(tmp_path), tmp_path / "state"
    with StateStore(state) as s:
        s.set_meta(point="p", plan_path=plan)
    code, out, _ = run_cli(["status", "--state-dir", str(state), "--json"], capsys)
    rows = json.loads(out)["instances"]
    assert code == 0 and [(r["id"], r["status"]) for r in rows] == [("a-0", "stopped")]


def test_a_plan_for_gpu_nodes_is_refused_on_a_host_without_them(tmp_path, capsys) -> None:
    """Issue 29 item 2: before, the local backend planned (and `status` showed) an A100
    plan's instances on this CPU-only host. Now apply names both and exits 2, unless
    `--node` says which node this host is."""
    from planner.adjuster.hostcheck import HostGpus, host_mismatch
    from planner.app.apply_checks import host_gpus
    from planner.schemas.cluster import Node

    if host_gpus().types:
        pytest.skip("this host has GPUs: the refusal is checked on a CPU-only host")
    plan, state = tiny_cpu_plan(tmp_path), tmp_path / "state"
    (tmp_path / "cluster.yaml").write_text(
        CPU_CLUSTER.replace("{type: cpu, count: 1}", "{type: A100-80GB-SXM, count: 4}")
    )
    for dry in (["--dry-run"], []):
        code, out, err = run_cli(["apply", plan, "--state-dir", str(state), *dry], capsys)
        assert code == 2, err
        assert (
            "this host has cpu (no GPU), but the plan's node 'local' has 4 x A100-80GB-SXM" in err
        )
        assert "--node local" in err
    assert not state.exists()  # refused before any side effect
    code, out, err = run_cli(["status", "--state-dir", str(state), "--json"], capsys)
    assert code == 2 and str(state) in err  # nothing applied: status names the missing dir
    args = ["apply", plan, "--state-dir", str(state), "--dry-run", "--json", "--node", "local"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert [a["instance"] for a in json.loads(out)["actions"]] == ["a-0"]
    # the comparison itself: types and counts, a cpu node anywhere
    node = Node.model_validate(
        {"name": "g", "cpu_memory_gib": 64, "gpus": [{"type": "H200-SXM", "count": 2}]}
    )
    assert host_mismatch(node, HostGpus(("H200-SXM",) * 2)) is None
    assert host_mismatch(node, HostGpus(("H200-SXM",) * 8)) is None
    assert "has 1 x H200-SXM" in host_mismatch(node, HostGpus(("H200-SXM",)))
    assert "has 2 x L40S" in host_mismatch(node, HostGpus(("L40S", "L40S")))
    cpu = Node.model_validate(
        {"name": "c", "cpu_memory_gib": 8, "gpus": [{"type": "cpu", "count": 1}]}
    )
    assert host_mismatch(cpu, HostGpus(("H200-SXM",))) is None


def test_down_refuses_a_state_dir_that_does_not_exist_and_json_errors_go_to_stdout(
    tmp_path, capsys
) -> None:
    """Issue 42 item 5. Before: `down --state-dir TYPO` made the folder and exited 0, and a
    failing command given --json printed nothing on stdout."""
    typo = tmp_path / "stat"
    code, out, err = run_cli(["down", "--state-dir", str(typo)], capsys)
    assert code == 2 and "does not exist" in err and not typo.exists() and out == ""
    code, out, _ = run_cli(["down", "--state-dir", str(typo), "--json"], capsys)
    err = json.loads(out)["error"]
    assert code == 2 and err["exit_code"] == 2 and err["type"] == "InputError"
    assert err["file"] == str(typo) and "does not exist" in err["message"] and err["fix"]
