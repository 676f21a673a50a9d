"""bench/adjust_replay.py's issue-41 scenarios: weeks of our own making, planned on their
first day, on which memory must follow the traffic (the weeks the issue describes are kept
for judging; these are not them: another seed, another fall, another shift).

- falling: the lab16 team's week (seed FALL_SEED) whose traffic falls to a quarter from
  FALL_S (Wednesday noon): from then on only a quarter of the sessions, drawn with a fixed
  seed, stay.
- mix-shift: the same team (seed MIX_SEED) where half of the users move their coder calls
  to the reasoner from day 2 (no adoption: every model is in use from day 0).

Targets on the falling week (split: planned on day 0, scored on the whole week; the
after-fall figures on the hours from FALL_S): warm GiB-hours after the fall at least 30%
below holding the plan's selected point, attainment >= held - 0.002, switch P95 within the
SLO's default switch target, and fewer warm GiB-hours after the fall than a nightly re-plan
on the previous day keeps (each night from day 1: optimize on the day before, hold its
selected point for the day). On every scenario: never dominated by a point held all week
(at least its attainment, at most its switch P95 and warm GiB, one strictly better), at
most 3 hops a day, and every hop between neighbouring points (a pair the plan records
as restarting nothing) restarts nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

DAY_S = 86400.0
FALL_SEED, MIX_SEED = 11, 12
FALL_S = 2.5 * DAY_S  # Wednesday 12:00 of a Monday week
FALL_KEEP = 0.25  # the share of sessions that stay after the fall
MIX_DAY = 2


def falling_week(spec: Any) -> pd.DataFrame:
    """The team's week whose traffic falls to a quarter from FALL_S (module docstring)."""
    from planner.optimizer.workload.synth import synth

    week = synth(spec, seed=FALL_SEED)
    sessions = np.array(sorted(week["session"].astype(str).unique()))
    rng = np.random.default_rng(FALL_SEED)
    keep = set(rng.choice(sessions, size=int(len(sessions) * FALL_KEEP), replace=False))
    late = week["timestamp"].to_numpy(float) >= FALL_S
    stay = ~late | week["session"].astype(str).isin(keep).to_numpy()
    return week[stay].reset_index(drop=True)


def mix_week(spec: Any) -> pd.DataFrame:
    """The team's week where half the users move their coder calls to the reasoner."""
    from planner.optimizer.workload.synth import synth

    shifted = spec.model_copy(
        update={
            "adopted_role": None,
            "switch_role": "coder",
            "switch_to_role": "reasoner",
            "switch_user_fraction": 0.5,
            "switch_day": MIX_DAY,
        }
    )
    return synth(shifted, seed=MIX_SEED)


def gib_h_after(out: dict, from_s: float) -> float:
    """Warm GiB-hours of a replay's adjusted series from `from_s` on."""
    return sum(
        r["warm_gpu_gib"] * out["window_s"] / 3600.0
        for r in out["series"]
        if r["start_s"] >= from_s
    )


def dominated_by(out: dict) -> list[str]:
    """The points held all week that dominate the adjusted run."""
    a = out["adjusted"]
    worse = []
    for name, m in out["static"].items():
        ge = (
            m["slo_attainment"] >= a["slo_attainment"],
            m["switch_p95_s"] <= a["switch_p95_s"],
            m["warm_gpu_gib"] <= a["warm_gpu_gib"],
        )
        gt = (
            m["slo_attainment"] > a["slo_attainment"],
            m["switch_p95_s"] < a["switch_p95_s"],
            m["warm_gpu_gib"] < a["warm_gpu_gib"],
        )
        if all(ge) and any(gt):
            worse.append(name)
    return worse


def neighbour_restarts(out: dict, plan: Any) -> list[str]:
    """Hops between points the plan records as restarting nothing that restarted something."""
    bad = []
    for h in out["hops"]:
        rec = plan.hops.get(h["from"], {}).get(h["to"])
        if rec is not None and rec.restarts == 0 and h["restarts"] > 0:
            bad.append(f"{h['from']}->{h['to']} at {h['at_s'] / 3600:.0f} h")
    return bad


def common_checks(out: dict, plan: Any, tag: str) -> dict[str, bool]:
    """The targets every scenario has (module docstring)."""
    dom, bad = dominated_by(out), neighbour_restarts(out, plan)
    if dom:
        print(f"  {tag}: dominated by {dom}")
    if bad:
        print(f"  {tag}: neighbouring hops that restarted: {bad}")
    return {
        f"{tag}: never dominated by a point held all week": not dom,
        f"{tag}: <= 3 hops a day": out["max_hops_per_day"] <= 3,
        f"{tag}: hops between neighbouring points restart nothing": not bad,
    }


def nightly_gib_h(week: pd.DataFrame, plan_for, replay_held, from_s: float) -> tuple[float, float]:
    """(warm GiB-hours from `from_s` on, attainment there) of a nightly re-plan: each day d
    from 1 held at the selected point of a plan made on day d - 1."""
    days = int(np.floor(week["timestamp"].max() / DAY_S)) + 1
    gib_h = 0.0
    met = 0.0
    n = 0
    for d in range(1, days):
        a, b = d * DAY_S, (d + 1) * DAY_S
        if b <= from_s:
            continue
        plan = plan_for(week[(week["timestamp"] >= a - DAY_S) & (week["timestamp"] < a)])
        day = week[(week["timestamp"] >= a) & (week["timestamp"] < b)]
        if not len(day):
            continue
        out = replay_held(plan, day)
        gib_h += gib_h_after(out, from_s)
        k = int((day["timestamp"] >= from_s).sum())
        met += out["adjusted"]["slo_attainment"] * len(day)
        n += len(day)
        print(
            f"  nightly re-plan for day {d}: {plan.selected} of {[p.name for p in plan.points]}"
            f" ({k} requests after the fall)"
        )
    return gib_h, (met / n if n else 1.0)


__all__ = [
    "FALL_S",
    "common_checks",
    "dominated_by",
    "falling_week",
    "gib_h_after",
    "mix_week",
    "neighbour_restarts",
    "nightly_gib_h",
]
