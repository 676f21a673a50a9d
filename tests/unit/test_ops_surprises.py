"""Silence and surprises a newcomer met (issue 32, item 4): read-only commands on a state dir
that does not exist, and `validate` reporting every error, as JSON too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli as _run

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "small"


ADJUST_ONCE = ["adjust", "--plan", str(ROOT / "tests/golden/plan_small.yaml"), "--once"]
ADJUST_ONCE += ["--dry-run", "--models", str(SMALL / "models.yaml")]
ADJUST_ONCE += ["--cluster", str(SMALL / "cluster.yaml")]


@pytest.mark.parametrize("argv", [["status"], ["status", "--json"], ADJUST_ONCE])
def test_a_read_only_command_on_a_missing_state_dir_exits_2_naming_it(argv, tmp_path, capsys):
    state = tmp_path / "typo-state"
    code, out, err = _run([*argv, "--state-dir", str(state)], capsys)
    assert code == 2, out + err
    assert str(state) in err and "does not exist" in err
    assert not state.exists()  # nothing created


def _bad_cluster(tmp_path: Path) -> Path:
    text = (SMALL / "cluster.yaml").read_text().replace("cpu_memory_gib", "ram_gib")
    assert text.count("ram_gib") == 2
    out = tmp_path / "cluster.yaml"
    out.write_text(text)
    return out


def test_validate_names_every_error_with_did_you_mean(tmp_path, capsys):
    bad = _bad_cluster(tmp_path)
    code, _, err = _run(["validate", str(bad)], capsys)
    assert code == 2
    assert "nodes[0].ram_gib" in err and "nodes[1].ram_gib" in err
    assert "did you mean 'cpu_memory_gib'" in err
    assert "Field required" not in err  # the missing field is the misspelt one, said once


def test_validate_reports_every_file_and_json_on_failure(tmp_path, capsys):
    bad = _bad_cluster(tmp_path)
    missing = tmp_path / "missing.yaml"
    argv = ["validate", str(bad), str(SMALL / "models.yaml"), str(missing)]
    code, out, err = _run(argv, capsys)
    assert code == 2 and str(missing) in err and str(bad) in err
    assert "ok" in out and "models.yaml" in out
    code, out, _ = _run([*argv, "--json"], capsys)
    assert code == 2
    res = json.loads(out)
    assert [r["ok"] for r in res] == [False, True, False]
    assert [p["path"] for p in res[0]["problems"]] == ["nodes[0].ram_gib", "nodes[1].ram_gib"]
    assert res[0]["problems"][0]["fix"] == "rename it to 'cpu_memory_gib'"
    assert res[2]["error"].endswith("file not found")


def test_optimize_in_a_pipe_prints_progress_and_fits_80_columns(tmp_path):
    import os
    import re
    import subprocess
    import sys

    argv = [
        "optimize",
        "-c",
        f"{SMALL}/cluster.yaml",
        "-m",
        f"{SMALL}/models.yaml",
        "-s",
        f"{SMALL}/slo.yaml",
        "-w",
        f"{SMALL}/workload.yaml",
        "--evals",
        "6",
        "--no-baselines",
        "-o",
        str(tmp_path / "p.yaml"),
    ]
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run(
        [sys.executable, "-m", "planner.cli.main", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    lines = re.findall(r"optimize: (\d+)/(\d+) evaluated", proc.stderr)
    assert len(lines) >= 2 and lines[0][0] == "1"
    made = int(re.search(r"(\d+) evaluations", proc.stdout).group(1))
    assert lines[-1] == (str(made), str(made))
    # its table and title fit 80 columns: nothing cropped
    assert max(len(ln) for ln in proc.stdout.splitlines()) <= 80
    assert "the whole trace" in " ".join(proc.stdout.split())


def test_status_fits_80_columns_without_cutting_cells(tmp_path):
    import os
    import subprocess
    import sys

    from planner.adjuster.state import InstanceRow, StateStore

    state = tmp_path / "state"
    with StateStore(state) as s:
        for k, m in enumerate(["summarizer-8b", "coder-32b-instruct", "planner-7b"]):
            s.upsert(
                InstanceRow(
                    id=f"{m}-0",
                    model=m,
                    variant="bf16",
                    node="gpu-node-a",
                    port=8101 + k,
                    status="stopped",
                )
            )
        s.set_meta(point="balanced-lean", plan_path="/srv/planner/plans/lab16.plan.yaml")
    proc = subprocess.run(
        [sys.executable, "-m", "planner.cli.main", "status", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80 and "…" not in proc.stdout
    assert "coder-32b-instruct-0" in proc.stdout and "left out at 80 columns" in proc.stdout


def test_a_points_capacity_never_says_the_whole_cluster_is_short():
    from planner.optimizer.capacity import capacity_report

    # two models, each at 60% of its capacity in hour 0: fine for a point (each has its own
    # instances); for the whole cluster (each share counted against all of it) 120%
    trace = {
        "timestamp": [10.0 * i for i in range(12)],
        "model": ["a", "b"] * 6,
        "input_tokens": [100] * 12,
        "output_tokens": [10] * 12,
    }
    cap = {"a": 10 / 3600, "b": 10 / 3600}  # 10 requests/h each; 6 each came
    point = capacity_report(trace, cap, whole_cluster=False)
    assert not point.overloaded and not any("whole cluster" in ln for ln in point.lines())
    assert capacity_report(trace, cap).hours_over_all == [0]


def test_estimate_says_does_not_fit_without_a_unit_and_explains_the_burst(capsys):
    code, out, _ = _run(
        ["estimate", "--model", "Qwen2.5-Coder-32B-Instruct", "--gpu", "RTX-4090", "--tp", "1"],
        capsys,
    )
    assert code == 0 and "n/a (does not fit) s" not in out and "n/a (does not fit)" in out
    code, out, _ = _run(
        ["estimate", "--model", "Qwen2.5-7B-Instruct", "--gpu", "RTX-4090", "--concurrency", "8"],
        capsys,
    )
    assert "of requests in a burst" not in out
    assert "8 clients sending requests back to back" in out


def test_an_unknown_models_suggestion_follows_its_architecture(tmp_path, capsys):
    models = tmp_path / "models.yaml"
    models.write_text(
        "kind: models\nmodels:\n  - name: r1\n"
        "    architecture: DeepSeek-R1-Distill-Qwen-14B\n"
        "    variants: [{name: bf16, quantization: bf16}]\n"
    )
    code, _, err = _run(["validate", str(models)], capsys)
    assert code == 2
    assert "did you mean Qwen2.5-14B-Instruct?" in err and "DeepSeek-V2-Lite" not in err
    assert "base model's architecture" in err


def test_workload_inspect_fits_80_columns_without_cutting_cells(tmp_path):
    import os
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "planner.cli.main", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "80"},
            timeout=300,
        )

    trace = tmp_path / "w.parquet"
    proc = cli(
        "workload",
        "synth",
        "--spec",
        f"{SMALL}/workload.yaml",
        "--models",
        f"{SMALL}/models.yaml",
        "-o",
        str(trace),
    )
    assert proc.returncode == 0, proc.stderr
    proc = cli("workload", "inspect", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert max(len(ln) for ln in proc.stdout.splitlines()) <= 80 and "…" not in proc.stdout
    assert "coder-32b" in proc.stdout and "left out at 80 columns" in proc.stdout


@pytest.mark.parametrize("role", ["embed", "reasoner"])
def test_a_default_role_can_be_removed_from_a_workload_spec(role, tmp_path):
    from planner.app.files import synth_spec
    from planner.optimizer.workload.synth import synth

    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(f"roles:\n  {role}: null\nusers: 3\ndays: 1\n")
    spec = synth_spec(spec_file)
    assert role not in spec.roles and role not in spec.start_role
    assert all(role not in row for row in spec.transitions.values())
    assert role not in (spec.adopted_role, spec.switch_role)
    from planner.optimizer.workload.synth_spec import default_spec

    df = synth(spec, seed=0)
    assert len(df) > 0 and default_spec().roles[role].model not in set(df["model"])


def test_workload_import_knows_openai_log_names_and_maps_columns(tmp_path, capsys):
    from planner.trace.frame import read_trace

    log = tmp_path / "log.jsonl"
    log.write_text(
        '{"created": 1700000000, "model": "m", "user": "ann", "usage": {"prompt_tokens": 1200, '
        '"completion_tokens": 80, "prompt_tokens_details": {"cached_tokens": 1000}}}\n'
        '{"created": 1700000005, "model": "m", "user": "bob", "usage": {"prompt_tokens": 900, '
        '"completion_tokens": 40}}\n'
    )
    out = tmp_path / "a.parquet"
    code, text, err = _run(
        ["workload", "import", str(log), "--format", "jsonl", "-o", str(out)], capsys
    )
    assert code == 0, err
    assert "usage.prompt_tokens -> input_tokens" in text
    df = read_trace(out)
    assert list(df["input_tokens"]) == [1200, 900] and list(df["cached_tokens"]) == [1000, 0]
    csv = tmp_path / "log.csv"
    csv.write_text("time,llm,prompt_tokens,completion_tokens\n1700000000,m,100,10\n")
    argv = ["workload", "import", str(csv), "--format", "csv", "-o", str(tmp_path / "b.parquet")]
    code, _, err = _run(argv, capsys)
    assert code == 2 and "--map" in err  # the model column has a name of its own
    code, _, err = _run([*argv, "--map", "llm=model"], capsys)
    assert code == 0, err
    code, _, err = _run([*argv, "--map", "llm=modle"], capsys)
    assert code == 2 and "did you mean 'model'" in err
