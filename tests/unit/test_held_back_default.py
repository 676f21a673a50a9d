"""The default held-back days stand for the week (issue 30 item 2): one working day and one
quiet day (`--held-back week`), not the trace's last two days (a Monday week's weekend,
whose few requests the headline figures came from before); the plan names the days, their
requests and the rule, and `plan show` gives the held-back and the fitted figures side by
side."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from cli_helpers import run_cli

from planner.optimizer import scoring
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.point_metrics import PointMetrics
from planner.schemas import load_plan

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "small"


def test_the_default_holds_back_a_working_day_and_a_weekend_day():
    counts = [9, 8, 7, 9, 8, 1, 2]  # Monday .. Sunday
    week = pd.DataFrame(
        {"timestamp": [d * 86400.0 + s for d, n in enumerate(counts) for s in range(n)]}
    ).assign(model="a")
    rule = OptimizeConfig().held_back
    days = scoring.held_back_days(week, scoring.validate_days(week, None), rule)
    assert days == [4, 6]  # Friday and Sunday
    assert scoring.held_back_days(week, 2) == days  # the function's default is the same


def test_the_plan_and_plan_show_name_the_held_back_days(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    (tmp_path / "w.yaml").write_text("users: 6\ndays: 7\n")  # synth's week starts on Monday
    out = tmp_path / "p.yaml"
    args = [
        "optimize",
        "-c",
        f"{SMALL}/cluster.yaml",
        "-m",
        f"{SMALL}/models.yaml",
        "-s",
        f"{SMALL}/slo.yaml",
        "-w",
        str(tmp_path / "w.yaml"),
        "--evals",
        "3",
        "--json",
        "-o",
        str(out),
    ]
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    got = json.loads(stdout)
    held = [d["day"] for d in got["held_days"]]
    assert len(held) == 2 and sum(d < 5 for d in held) == 1  # one working day, one weekend
    plan = load_plan(out)
    assert plan.search["held_back"] == got["held_back"] == "week"
    assert plan.search["held_days"] == got["held_days"]
    assert sum(d["requests"] for d in got["held_days"]) == plan.search["held_requests"]
    sel = plan.point(plan.selected)
    assert sel.predicted_fit is not None
    code, shown, err = run_cli(["plan", "show", str(out)], capsys)
    assert code == 0, err
    text = " ".join(shown.split())
    which = ", ".join(f"day {d['day']} ({d['requests']} requests)" for d in got["held_days"])
    assert f"held back: {which}" in text
    assert f"fitted: the other days ({plan.search['fit_requests']} requests)" in text


def test_each_part_is_closed_up():
    """A held-back Friday is followed by the Sunday, the fitted Thursday by the Saturday: no
    empty day inside either part counts in its time averages (warm memory, twins' cap)."""
    counts = [9, 8, 7, 9, 8, 1, 2]
    week = pd.DataFrame(
        {"timestamp": [d * 86400.0 + 3600.0 * s for d, n in enumerate(counts) for s in range(n)]}
    ).assign(model="a")
    fit, held = scoring.split_days(week, 2)
    assert sorted(set(held["timestamp"] // 86400)) == [4, 5]  # Friday, then Sunday
    assert sorted(set(fit["timestamp"] // 86400)) == [0, 1, 2, 3, 4]  # Saturday after Thursday
    assert (held["timestamp"] % 86400).tolist() == [3600.0 * s for s in [*range(8), 0, 1]]
    assert [len(d) for d in scoring.each_day(held)] == [8, 2]


def test_a_point_must_beat_its_twin_on_each_held_back_day():
    """Beating the twin on the busy day is not enough where the quiet day's twin switches
    as fast: the busy day's requests would outvote it in their sum."""
    busy = (PointMetrics(slo_attainment=0.95, switch_p95_s=10.0), PointMetrics(0.8, 0, 0, 120.0))
    quiet = (PointMetrics(slo_attainment=0.98, switch_p95_s=8.0), PointMetrics(0.97, 0, 0, 0.7))
    assert scoring.beats_twin_each_day([busy])
    assert not scoring.beats_twin_each_day([busy, quiet])
    assert scoring.beats_twin_each_day([])  # nothing held back: no verdict by day
