"""Drift verdicts: quiet on stationary traffic, firing on a changed mix (issue 3).

Set-up for each seed: an 8-day stationary synthetic trace of 10 users; the reference is the
summary of days 0-6 (what a plan stores), the windows are the 24 hours of day 7.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from planner.optimizer.workload.characterize import summarize
from planner.optimizer.workload.drift import DriftReport, chi2_quantile, drift
from planner.optimizer.workload.synth import synth
from planner.optimizer.workload.synth_spec import default_spec

SEEDS = [0, 1, 2, 3, 4, 5]
CHANGE_H = 12


def _setup(seed: int) -> tuple[dict, pd.DataFrame]:
    spec = default_spec().model_copy(update={"stationary": True, "days": 8})
    full = synth(spec, seed=seed)
    ref = summarize(full[full["timestamp"] < 7 * 86400])
    day = full[full["timestamp"] >= 7 * 86400].copy()
    day["timestamp"] -= 7 * 86400
    return ref, day.reset_index(drop=True)


def _hour(df: pd.DataFrame, h: int) -> pd.DataFrame:
    return df[(df["timestamp"] >= h * 3600) & (df["timestamp"] < (h + 1) * 3600)]


def _double_share(ref: dict, day: pd.DataFrame, target: str, seed: int) -> pd.DataFrame:
    """From CHANGE_H on, relabel other requests so `target` has twice its reference share."""
    out = day.copy()
    rng = np.random.default_rng(seed)
    rates = ref["rate_per_hour_of_day"]
    col = out.columns.get_loc("model")
    for h in range(CHANGE_H, 24):
        idx = _hour(out, h).index.to_numpy()
        total = sum(r[h] for r in rates.values())
        if len(idx) == 0 or total == 0:
            continue
        have = int((out.loc[idx, "model"] == target).sum())
        need = round(2 * rates[target][h] / total * len(idx)) - have
        others = idx[(out.loc[idx, "model"] != target).to_numpy()]
        if need > 0:
            out.iloc[rng.choice(others, size=min(need, len(others)), replace=False), col] = target
    return out


def _new_model(day: pd.DataFrame, seed: int, share: float = 0.1) -> pd.DataFrame:
    out = day.copy()
    rng = np.random.default_rng(seed)
    col = out.columns.get_loc("model")
    for h in range(CHANGE_H, 24):
        idx = _hour(out, h).index.to_numpy()
        k = round(share * len(idx))
        if k:
            out.iloc[rng.choice(idx, size=k, replace=False), col] = "new-model"
    return out


def _first_busy_window(ref: dict, df: pd.DataFrame) -> tuple[int, DriftReport]:
    """The first window at or after the change that has enough traffic to judge."""
    for h in range(CHANGE_H, 24):
        rep = drift(ref, _hour(df, h))
        if rep.verdict != "too_few_requests":
            return h, rep
    raise AssertionError("no window with traffic after the change")


@pytest.mark.parametrize("seed", SEEDS)
def test_stationary_day_never_alarms(seed):
    ref, day = _setup(seed)
    verdicts = [drift(ref, _hour(day, h)) for h in range(24)]
    fired = [(h, r.reasons) for h, r in enumerate(verdicts) if r.verdict == "drift"]
    assert fired == []
    assert sum(r.verdict == "stable" for r in verdicts) >= 8  # the working hours were judged


@pytest.mark.parametrize("seed", SEEDS)
def test_doubled_share_fires_in_first_window(seed):
    ref, day = _setup(seed)
    h, rep = _first_busy_window(ref, _double_share(ref, day, "planner-7b", seed))
    assert h == CHANGE_H
    assert rep.verdict == "drift"
    assert any(r.startswith(("share:planner-7b", "mix")) for r in rep.reasons)


@pytest.mark.parametrize("seed", SEEDS)
def test_new_model_fires_in_first_window(seed):
    ref, day = _setup(seed)
    h, rep = _first_busy_window(ref, _new_model(day, seed))
    assert h == CHANGE_H
    assert rep.verdict == "drift"
    assert any("new-model" in r or r.startswith("mix") for r in rep.reasons)


def test_small_window_is_not_judged():
    ref, day = _setup(0)
    rep = drift(ref, _hour(day, 12).head(10))
    assert rep.verdict == "too_few_requests" and rep.reasons == []
    assert drift(ref, day.iloc[0:0]).verdict == "too_few_requests"


def test_summary_window_equals_frame_window():
    ref, day = _setup(1)
    w = _hour(day, 10)
    assert drift(ref, w) == drift(ref, summarize(w))


def test_rate_surge_beyond_peak_fires():
    ref, day = _setup(2)
    w = _hour(day, 15)
    surge = pd.concat([w] + [w.assign(session=w["session"] + f"-x{i}") for i in range(3)])
    rep = drift(ref, surge.sort_values("timestamp"))
    assert any(r.startswith("rate:") for r in rep.reasons)


def test_chi2_quantile_close_to_tables():
    # chi-square upper quantiles at p = 1e-4 (tables: df 1 -> 15.14, 5 -> 25.74, 20 -> 52.39);
    # Wilson-Hilferty errs high (conservative), most at df 1.
    for df, want in ((1, 15.14), (5, 25.74), (20, 52.39)):
        assert want <= chi2_quantile(df) < 1.08 * want
