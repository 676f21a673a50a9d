"""Replay through the policy: JSON shape, every request counted once, hops, the CLI."""

from __future__ import annotations

import json
from types import SimpleNamespace

import adjust_helpers as h
import pytest
from cli_helpers import METRIC_KEYS, run_cli

from planner.adjuster.policy import AdjustConfig
from planner.adjuster.replay import replay
from planner.cli.main import main


@pytest.fixture(scope="module")
def flip():
    """Day 0 only planner-7b; from day 1 coder-32b too: `shared` thrashes, `split` does not."""
    tr, p = h.adoption_plan()
    return tr, p, h.perfs(p)


def test_replay_keys_and_request_counts(flip):
    tr, p, perfs = flip
    out = replay(p, tr, h.slo(), perfs, AdjustConfig())
    assert set(out["adjusted"]) == METRIC_KEYS
    assert set(out["static"]) == {"shared", "split"}
    for m in [out["adjusted"], *out["static"].values()]:
        assert set(m) == METRIC_KEYS
        assert m["requests"] == len(tr)  # every request in exactly once
        assert 0.0 <= m["slo_attainment"] <= 1.0
        assert m["warm_gpu_gib"] > 0
    assert 24 <= out["windows"] <= 48  # clock hours from 00:00 of day 0 to the last request
    for hop in out["hops"]:
        assert set(hop) == {
            "at_s",
            "from",
            "to",
            "reason",
            "restarts",
            "wakes",
            "sleeps",
            "stops",
            "tiers_only",
        }


def test_replay_hops_when_a_model_is_adopted(flip):
    """coder-32b appears on day 1: the replay leaves the time-shared GPU for the split point."""
    tr, p, perfs = flip
    out = replay(p, tr, h.slo(), perfs, AdjustConfig(min_dwell_s=3600.0))
    assert out["hops"], out["actions"]
    first = out["hops"][0]
    assert first["from"] == "shared" and first["to"] == "split"
    assert first["at_s"] > 86400.0  # after the adoption, not on the reference day
    assert out["final_point"] == "split"
    assert out["adjusted"]["slo_attainment"] > out["static"]["shared"]["slo_attainment"]
    assert out["adjusted"]["warm_gpu_gib"] < out["static"]["split"]["warm_gpu_gib"]
    # the hop's restarts count as switches of the adjusted series
    assert out["adjusted"]["switch_count"] >= 2


def test_warmup_is_decided_on_but_not_scored(flip):
    tr, p, perfs = flip
    cfg = AdjustConfig(min_dwell_s=3600.0)
    full = replay(p, tr, h.slo(), perfs, cfg)
    out = replay(p, tr, h.slo(), perfs, cfg, warmup_s=86400.0)
    assert out["hops"] == full["hops"]  # the same decisions
    later = int((tr["timestamp"] >= 86400.0).sum())
    assert 0 < later < len(tr)
    for m in [out["adjusted"], *out["static"].values()]:
        assert m["requests"] == later


def test_replay_is_deterministic(flip):
    tr, p, perfs = flip
    a = replay(p, tr, h.slo(), perfs, AdjustConfig())
    b = replay(p, tr, h.slo(), perfs, AdjustConfig())
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_stationary_replay_has_no_hops():
    from planner.optimizer.workload.synth import synth

    tr = synth(h.spec(2, hot=h.A, stationary=True), seed=5)
    p = h.plan(h.reference(tr[tr["timestamp"] < 86400.0]))
    out = replay(p, tr, h.slo(), h.perfs(p), AdjustConfig(min_dwell_s=0))
    assert out["hops"] == []
    assert out["adjusted"] == out["static"]["a-hot"]  # same point all along, same figures


def test_cli_replay_json(tmp_path, capsys, flip):
    tr, p, _ = flip
    plan_file = h.write_inputs(tmp_path, p)
    tr.to_csv(tmp_path / "trace.csv", index=False)
    argv = [
        "adjust",
        "--plan",
        plan_file,
        "--replay",
        str(tmp_path / "trace.csv"),
    ]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--window", "1h", "--json"])
    assert e.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"adjusted", "static", "hops"} <= set(out)
    assert out["adjusted"]["requests"] == len(tr)
    with pytest.raises(SystemExit) as e:
        main([*argv, "--window", "soon"])
    assert e.value.code == 2


def test_print_cron(tmp_path, capsys):
    argv = ["adjust", "--plan", tmp_path / "p.yaml", "--state-dir", tmp_path, "--print-cron"]
    code, out, _ = run_cli(argv, capsys)
    assert code == 0
    assert "--once" in out and "[Timer]" in out and "[Service]" in out
    assert out.splitlines()[1].startswith("5 * * * * ")


def test_replay_reoptimize_adds_points(flip):
    """A plan with only `shared` fails once coder-32b arrives; auto re-optimization adds `split`."""
    tr, p, perfs = flip
    only = p.model_copy(update={"points": [p.point("shared")]})
    calls = []

    def points(window):
        calls.append(len(window))
        return [p.point("split")], {"split": perfs["split"]}

    cfg = AdjustConfig(reoptimize="auto", min_dwell_s=3600.0)
    reoptimizer = SimpleNamespace(points=points)  # a replay asks its ReoptimizePolicy for points
    out = replay(only, tr, h.slo(), {"shared": perfs["shared"]}, cfg, reoptimizer=reoptimizer)
    assert calls and all(n > 0 for n in calls)
    first = next(a for a in out["actions"] if a["kind"] == "reoptimize")
    assert first["added_points"] == [f"split@{int(first['at_s'] // 3600)}h"]
    assert out["hops"] and out["hops"][0]["to"] == first["added_points"][0]
    assert set(out["static"]) == {"shared"}  # only the plan's own points are held all along
    assert out["adjusted"]["requests"] == len(tr)
    assert out["adjusted"]["slo_attainment"] > out["static"]["shared"]["slo_attainment"]


def test_replay_reoptimizes_on_the_first_miss_beyond_the_plan(flip):
    """coder-32b, which the plan never saw, arrives on day 1: a window in which no point
    meets the SLO re-optimizes, saying the load is beyond the plan (no later than with the
    check off), the adjuster moves to the new point and never returns to `shared`, which it
    saw failing that traffic."""
    tr, p, perfs = flip
    only = p.model_copy(update={"points": [p.point("shared")]})

    def points(window):
        return [p.point("split")], {"split": perfs["split"]}

    reoptimizer = SimpleNamespace(points=points)

    def run(factor: float) -> dict:
        cfg = AdjustConfig(reoptimize="auto", min_dwell_s=3600.0, beyond_peak_factor=factor)
        return replay(only, tr, h.slo(), {"shared": perfs["shared"]}, cfg, reoptimizer=reoptimizer)

    now, old = run(1.5), run(1000.0)
    first = now["reoptimizations"][0]
    assert "beyond the plan's peak for coder-32b" in first["reason"]
    assert first["at_s"] <= old["reoptimizations"][0]["at_s"]
    assert [hop["to"] for hop in now["hops"]] == [first["added_points"][0]]
    assert now["adjusted"]["slo_attainment"] >= old["adjusted"]["slo_attainment"]


def test_evaluate_and_replay_say_how_they_score(tmp_path, capsys, flip):
    """Issue 15 item 8, issue 41 item 7: `evaluate` (one run over the whole trace) and
    `adjust --replay` (one run per point in force, hops charged) say how they score."""
    tr, p, _ = flip
    plan_file = h.write_inputs(tmp_path, p)
    trace = tmp_path / "trace.csv"
    tr.to_csv(trace, index=False)
    with pytest.raises(SystemExit) as e:
        main(["evaluate", plan_file, "--workload", str(trace)])
    out = " ".join(capsys.readouterr().out.split())  # tables wrap their notes
    assert e.value.code == 0 and "the same figures for a point held all along" in out
    with pytest.raises(SystemExit) as e:
        main(["adjust", "--plan", plan_file, "--replay", str(trace)])
    out = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0
    assert "a point held all along has evaluate's figures" in out and "pays for it" in out


def test_holding_a_point_gives_evaluates_figures(flip):
    """One continuous run (issue 41 item 7): a point held all week is scored as `planner
    evaluate` scores it (one simulation over the whole trace), not from a fresh start each
    hour with its sleeping models awake."""
    from planner.optimizer.sim.simulator import simulate

    tr, p, perfs = flip
    out = replay(p, tr, h.slo(), perfs, AdjustConfig())
    for pt in p.points:
        ev = simulate(pt, perfs[pt.name], tr, h.slo(), model_names=[h.A, h.B]).point_metrics()
        got = out["static"][pt.name]
        assert got["slo_attainment"] == pytest.approx(ev.slo_attainment, abs=1e-9)
        assert got["warm_gpu_gib"] == pytest.approx(ev.warm_gpu_gib, rel=1e-9)
        assert got["switch_p95_s"] == pytest.approx(ev.switch_p95_s, abs=1e-9)
        assert got["switch_count"] == ev.switch_count


def test_replay_json_has_a_per_hour_series(flip):
    tr, p, perfs = flip
    out = replay(p, tr, h.slo(), perfs, AdjustConfig(min_dwell_s=3600.0), warmup_s=86400.0)
    series = out["series"]
    assert len(series) == out["windows"] - 24  # the scored windows, one row each
    assert sum(sum(r["requests"].values()) for r in series) == out["adjusted"]["requests"]
    in_force = {d["at_s"] - 3600.0: d["from"] for d in out["decisions"]}
    hops_at = {x["at_s"] for x in out["hops"]}
    for r in series:
        assert set(r) == {
            "start_s",
            "point",
            "hop",
            "warm_gpu_gib",
            "requests",
            "switch_waits",
            "switch_p95_s",
            "slo_attainment",
        }
        assert r["point"] == in_force[r["start_s"]]
        assert r["hop"] == (r["start_s"] in hops_at)
        assert r["warm_gpu_gib"] > 0
    assert any(r["hop"] for r in series), "no hop in the scored days: the test proves less"


def test_replay_json_with_auto_reoptimize_is_only_json_and_plots(flip, tmp_path):
    """Issue 41 item 7: under --json nothing but JSON reaches stdout, even when a
    re-optimization runs the MILP solver (whose banner goes to the process's stdout, so a
    fresh process: the banner shows once per process); --plot writes the picture."""
    import subprocess
    import sys

    tr, p, _ = flip
    only = p.model_copy(update={"points": [p.point("shared")]})
    plan_file = h.write_inputs(tmp_path, only)
    trace = tmp_path / "trace.csv"
    tr.to_csv(trace, index=False)
    png = tmp_path / "replay.png"
    argv = [
        sys.executable,
        "-m",
        "planner.cli.main",
        "adjust",
        "--plan",
        plan_file,
        "--replay",
        str(trace),
        "--reoptimize",
        "auto",
        "--policy",
        "reoptimize_evals=2",
        "--json",
        "--plot",
        str(png),
    ]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)  # the whole of stdout parses
    assert out["reoptimizations"], "no re-optimization ran: the test proves nothing"
    assert out["series"] and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
