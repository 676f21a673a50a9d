"""One resolver of a plan's recorded inputs (issue 30 item 7): every plan-reading command
finds the cluster, models, SLO and calibration the same way, refuses a recorded profile
folder it cannot find (evaluate used to drop it silently, adjust never read it), and adjust
scores with the plan's calibration."""

from __future__ import annotations

import dataclasses

import yaml
from cli_helpers import run_cli_one_line
from plan_files import SMALL, golden_small_plan

from planner.optimizer.perf import default_calib


def _with_profiles(tmp_path, folder: str) -> object:
    plan = golden_small_plan(tmp_path)
    doc = yaml.safe_load(plan.read_text())
    doc["inputs"]["profiles"] = {"path": folder, "sha256": "0" * 64}
    plan.write_text(yaml.safe_dump(doc, sort_keys=False))
    return plan


def test_a_recorded_calibration_that_is_missing_stops_every_command(tmp_path, capsys):
    plan, state = _with_profiles(tmp_path, str(tmp_path / "gone")), tmp_path / "state"
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,model,input_tokens,output_tokens\n0,planner-7b,100,10\n")
    for argv in (
        ["evaluate", plan, "--workload", trace],
        ["adjust", "--plan", plan, "--state-dir", state, "--once", "--dry-run"],
        ["adjust", "--plan", plan, "--replay", trace],
    ):
        code, _, err = run_cli_one_line(argv, capsys)
        assert code == 2, (argv[0], err)
        assert "inputs.profiles.path" in err and "--profiles" in err, (argv[0], err)
    assert not state.exists()


def test_adjust_scores_with_the_plans_calibration(tmp_path, monkeypatch):
    """The perfs the adjuster scores points with are the calibrated ones."""
    from planner.app import adjust_inputs
    from planner.app import inputs as app_inputs

    slow = dataclasses.replace(
        default_calib("ada"), prefill_overhead_s=0.5, bandwidth_efficiency=0.1
    )
    monkeypatch.setattr(app_inputs, "calibration", lambda p: ({"L40S": slow} if p else {}, []))
    plan = _with_profiles(tmp_path, str(SMALL))  # any folder that exists
    inp = adjust_inputs.load(plan, None, None, None)
    cfg = adjust_inputs.policy_config("1h", "suggest", None, None, None, [])
    tick = adjust_inputs.tick_config(inp, cfg, state_dir=tmp_path, dry_run=True, timeout_s=1)
    plain = adjust_inputs.load(golden_small_plan(tmp_path, name="plain.yaml"), None, None, None)
    name = inp.plan.points[0].name
    on_l40s = next(i.id for i in inp.plan.points[0].instances if i.node == "n0")
    got, spec = tick.perfs[name][on_l40s], plain.all_perfs()[name][on_l40s]
    assert got.prefill_overhead_s == 0.5 != spec.prefill_overhead_s  # calibrated, not spec
    assert "--profiles" in tick.suggest_command


def test_the_plan_records_the_runs_its_calibration_used(tmp_path, capsys):
    """Issue 31 item 4: a plan optimized with profiles names, per GPU type, the runs its
    factors were fitted from (`planner profile calibrate` writes them into the profile)."""
    from planner.schemas import load_plan

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    runs = ["Qwen3-8B tp1 bf16: 6 points (imported from bench.json)"]
    (profiles / "n0-L40S.yaml").write_text(
        "kind: profile\nnode: n0\ngpu_type: L40S\ncalibration:\n"
        "  compute_efficiency: 0.5\n  source: closed-loop fit (3 imported runs)\n"
        f"  runs: [{runs[0]!r}]\n"
    )
    out = tmp_path / "plan.yaml"
    optimize = [
        "optimize",
        "-c",
        SMALL / "cluster.yaml",
        "-m",
        SMALL / "models.yaml",
        "-s",
        SMALL / "slo.yaml",
        "-w",
        SMALL / "workload.yaml",
        "--evals",
        "2",
        "--no-baselines",
        "--json",
    ]
    code, _, err = run_cli_one_line([*optimize, "--profiles", profiles, "-o", out], capsys)
    assert code == 0, err
    ref = load_plan(out).calibration["L40S"]
    assert (ref.node, ref.runs) == ("n0", runs)
    assert ref.source.startswith("closed-loop fit")
    assert "calibration:" in out.read_text()
    # without profiles the plan records none (and the file has no such key)
    plain = tmp_path / "plain.yaml"
    code, _, err = run_cli_one_line([*optimize, "-o", plain], capsys)
    assert code == 0, err
    assert load_plan(plain).calibration == {} and "\ncalibration:" not in plain.read_text()
