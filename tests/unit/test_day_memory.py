"""Memory over the day (issue 30 item 3): `plan show` and `explain` say, per GPU, the peak
memory the point keeps awake and when, the awake hours and the idle-sleep rule; `plan show
--hour H` draws that hour. Before, the golden plan's GPU n0:0 read 17.3 GiB used (weights 0:
its three instances are host-tier) although 39.9 GiB are awake from 08:00 to 20:00. (Since
perf's refit the golden plan's n0:0 holds all three again, as before synth kept prompt +
output within max_context.) Since issue 30 item 2 the slow wakes are also awake the hour
before (`schedule.edge_rates`): 07:00 to 20:00."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli_one_line
from plan_files import golden_small_plan


def _show(tmp_path, capsys, *extra):
    code, out, err = run_cli_one_line(
        ["plan", "show", golden_small_plan(tmp_path), "--json", *extra], capsys
    )
    assert code == 0, err
    return json.loads(out)


def test_plan_show_gives_the_peak_its_hours_and_any_hour(tmp_path, capsys):
    day = _show(tmp_path, capsys, "--hour", "10")
    g0 = next(g for g in day["gpus"] if (g["node"], g["gpu"]) == ("n0", 0))
    used = g0["weights_gib"] + g0["kv_gib"] + g0["other_gib"] + g0["sleeping_gib"]
    assert g0["peak_gib"] == pytest.approx(39.9, abs=0.05) and g0["peak_gib"] > used + 20
    assert g0["peak_hours"] == list(range(7, 20))  # 8-19 and the hour before
    assert g0["at_hour_gib"] == g0["peak_gib"] and len(g0["awake_at_hour"]) == 3
    assert all(i["awake_hours"] == list(range(7, 20)) for i in g0["instances"])
    assert "1800 s after their last request" in day["idle_sleep"]
    night = _show(tmp_path, capsys, "--hour", "3")
    g0 = next(g for g in night["gpus"] if (g["node"], g["gpu"]) == ("n0", 0))
    assert g0["awake_at_hour"] == [] and g0["at_hour_gib"] == pytest.approx(1.5)  # 3 contexts


def test_explain_gives_the_memory_over_the_day(tmp_path, capsys):
    code, out, err = run_cli_one_line(["explain", golden_small_plan(tmp_path), "--json"], capsys)
    assert code == 0, err
    got = json.loads(out)
    peaks = {(g["node"], g["gpu"]): g["peak_gib"] for g in got["gpus"]}
    assert peaks[("n0", 0)] == pytest.approx(39.9, abs=0.05)
    assert "a request wakes them at any hour" in got["idle_sleep"]
    code, out, err = run_cli_one_line(["explain", golden_small_plan(tmp_path)], capsys)
    assert "peak 39.9 GiB at 07-20" in out
