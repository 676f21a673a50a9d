"""`planner workload synth|import|inspect|drift` through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from cli_helpers import run_cli

from planner.trace.frame import read_trace

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "plans" / "examples" / "lab16" / "models.yaml"
AZURE = ROOT / "tests" / "data" / "AzureLLMInferenceTrace_code.csv"


def test_print_spec_is_the_default_yaml(capsys):
    code, out, _ = run_cli(["workload", "synth", "--print-spec"], capsys)
    assert code == 0
    data = yaml.safe_load(out)
    assert data["users"] == 10 and data["roles"]["coder"]["model"] == "coder-32b"
    assert out.count("\n# ") > 30


def test_synth_same_seed_same_bytes_and_models_remap(tmp_path, capsys):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    argv = [
        "workload",
        "synth",
        "--users",
        "3",
        "--days",
        "2",
        "--seed",
        "4",
        "--models",
        str(MODELS),
    ]
    assert run_cli([*argv, "-o", str(a)], capsys)[0] == 0
    code, _, err = run_cli([*argv, "-o", str(b)], capsys)
    assert code == 0 and a.read_bytes() == b.read_bytes()
    assert "embed-small" in err and "tools-20b" in err  # remap and unused model are reported
    df = read_trace(a)
    assert df["user"].nunique() == 3 and df["timestamp"].max() < 2 * 86400


def test_synth_with_spec_file(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "users: 2\ndays: 1\nstationary: true\nroles:\n  coder: {output_median_tokens: 50}\n"
    )
    out = tmp_path / "t.csv"
    assert run_cli(["workload", "synth", "--spec", str(spec), "-o", str(out)], capsys)[0] == 0
    df = read_trace(out)
    assert df["user"].nunique() <= 2
    assert df[df["model"] == "coder-32b"]["output_tokens"].median() < 100


def test_synth_bad_output_suffix(tmp_path, capsys):
    code, _, err = run_cli(["workload", "synth", "-o", str(tmp_path / "t.xlsx")], capsys)
    assert code == 2 and "end the output name" in err


def test_import_azure_json(tmp_path, capsys):
    out = tmp_path / "az.parquet"
    code, stdout, _ = run_cli(
        [
            "workload",
            "import",
            str(AZURE),
            "--format",
            "azure",
            "-o",
            str(out),
            "--models",
            str(MODELS),
            "--json",
        ],
        capsys,
    )
    assert code == 0
    s = json.loads(stdout)
    assert s["rows_read"] == s["rows_kept"] == 8819 and s["skipped"] == {}
    assert len(read_trace(out)) == 8819


def test_import_counts_skipped_rows(tmp_path, capsys):
    src = tmp_path / "az.csv"
    src.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,10,2\n2023-11-16 18:17:04,1,0\n"
    )
    code, stdout, _ = run_cli(
        [
            "workload",
            "import",
            str(src),
            "--format",
            "azure",
            "-o",
            str(tmp_path / "o.csv"),
            "--assign",
            "coder-32b=1",
        ],
        capsys,
    )
    assert code == 0
    assert "skipped 1: zero output tokens" in stdout


def test_inspect_json_and_plot(tmp_path, capsys):
    trace = tmp_path / "t.parquet"
    run_cli(["workload", "synth", "--users", "4", "--days", "2", "-o", str(trace)], capsys)
    png = tmp_path / "fig.png"
    code, out, _ = run_cli(
        ["workload", "inspect", str(trace), "--json", "--plot", str(png)], capsys
    )
    assert code == 0
    s = json.loads(out)
    assert s["requests"] > 0 and set(s["mix"]) == set(s["models"])
    assert s["idle_arrivals_per_hour"]["idle_s"][0] == 10
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    code, out, _ = run_cli(["workload", "inspect", str(trace)], capsys)
    assert code == 0 and "switch rate" in out


def test_inspect_missing_file(tmp_path, capsys):
    code, _, err = run_cli(["workload", "inspect", str(tmp_path / "nope.csv")], capsys)
    assert code == 2 and "file not found" in err


def test_drift_trace_vs_trace_and_plan(tmp_path, capsys):
    ref = tmp_path / "ref.parquet"
    run_cli(
        ["workload", "synth", "--users", "6", "--days", "3", "--stationary", "-o", str(ref)], capsys
    )
    code, out, _ = run_cli(["workload", "drift", str(ref), str(ref), "--json"], capsys)
    assert code == 0
    rep = json.loads(out)
    assert rep["verdict"] == "stable" and rep["reasons"] == []
    # A window of a different team's traffic (other model names) drifts.
    other = tmp_path / "other.csv"
    other.write_text(
        "timestamp,model,input_tokens,output_tokens,session\n"
        + "".join(f"{36000 + i},gpt-x,100,10,s{i % 7}\n" for i in range(200))
    )
    code, out, _ = run_cli(["workload", "drift", str(ref), str(other), "--json"], capsys)
    rep = json.loads(out)
    assert rep["verdict"] == "drift" and any("gpt-x" in r for r in rep["reasons"])
    # A plan without a workload_summary is refused with a fix.
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "kind": "plan",
                "selected": "p",
                "points": [{"name": "p", "instances": []}],
            }
        )
    )
    code, _, err = run_cli(["workload", "drift", str(plan), str(other)], capsys)
    assert code == 2 and "no workload_summary" in err
    # With the summary the optimizer stores, the plan is the reference.
    from planner.io import dump_yaml
    from planner.optimizer.workload.characterize import summarize

    data = yaml.safe_load(plan.read_text())
    data["workload_summary"] = summarize(read_trace(ref))
    plan.write_text(dump_yaml(data))
    code, out, _ = run_cli(["workload", "drift", str(plan), str(ref), "--json"], capsys)
    assert code == 0 and json.loads(out)["verdict"] == "stable"


def test_synth_keeps_requests_within_each_models_max_context(tmp_path, capsys):
    models = yaml.safe_load(MODELS.read_text())
    for m in models["models"]:
        m["max_context"] = 4096
    mfile = tmp_path / "models.yaml"
    mfile.write_text(yaml.safe_dump(models))
    out = tmp_path / "t.parquet"
    argv = ["workload", "synth", "--users", "3", "--days", "1", "--models", str(mfile)]
    code, _, _ = run_cli([*argv, "-o", str(out)], capsys)
    df = read_trace(out)
    assert code == 0 and len(df) > 100
    assert (df["input_tokens"] + df["output_tokens"]).max() <= 4096


def test_drift_table_says_why_a_score_above_one_did_not_fire(tmp_path, capsys):
    ref = tmp_path / "ref.parquet"
    argv = ["workload", "synth", "--users", "6", "--days", "3", "--stationary", "-o", str(ref)]
    run_cli(argv, capsys)
    df = read_trace(ref)  # day 1 without its busiest model: that model's rate falls to 0
    day = df[(df["timestamp"] >= 86400) & (df["timestamp"] < 2 * 86400)]
    win = tmp_path / "win.csv"
    day[day["model"] != "coder-32b"].to_csv(win, index=False)
    code, out, _ = run_cli(["workload", "drift", str(ref), str(win), "--json"], capsys)
    scores = {s["name"]: s for s in json.loads(out)["scores"]}
    assert code == 0 and scores["rate:coder-32b"]["score"] >= 1
    assert not scores["rate:coder-32b"]["fired"]
    assert scores["rate:coder-32b"]["held"] == "less traffic: only a rise fires"
    assert all(bool(s["held"]) == (s["score"] >= 1 and not s["fired"]) for s in scores.values())
    code, out, _ = run_cli(["workload", "drift", str(ref), str(win)], capsys)
    flat = " ".join(out.split())
    assert "not fired: less traffic: only a rise fires" in flat.replace("│ ", "")
