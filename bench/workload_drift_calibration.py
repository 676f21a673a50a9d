"""The drift thresholds (optimizer/workload/drift.py) on synthetic traffic they were not set on.

For each seed: an 8-day stationary trace of 10 users; reference = summary of days 0-6;
windows = the 24 hours of day 7. Counts false alarms over all windows, and whether the
first window after a change at 12:00 fires: (a) planner-7b's share doubled relative to the
reference at that hour, (b) a new model taking 10% of requests. Prints the largest score of
each dimension on the stationary windows (1.0 is a threshold; effect floors also apply).

Split: the thresholds were set on seeds 0-59 (drift.py's calibration note); this bench
scores seeds from 1000 on (`--first-seed`), never used to set them.
Targets: at most 1% of stationary windows alarm; the new model fires in the first window
after the change in >= 95% of seeds, the doubled share in >= 85%.

    python bench/workload_drift_calibration.py [--seeds 20] [--first-seed 1000]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from planner.optimizer.workload.characterize import summarize
from planner.optimizer.workload.drift import drift
from planner.optimizer.workload.synth import synth
from planner.optimizer.workload.synth_spec import default_spec

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from result import cells

CHANGE_H = 12
CALIBRATION_SEEDS = range(60)  # what drift.py's thresholds were set on


def _hour(df: pd.DataFrame, h: int) -> pd.DataFrame:
    return df[(df["timestamp"] >= h * 3600) & (df["timestamp"] < (h + 1) * 3600)]


def _changed(ref: dict, day: pd.DataFrame, kind: str, seed: int) -> pd.DataFrame:
    out = day.copy()
    rng = np.random.default_rng(seed)
    col = out.columns.get_loc("model")
    rates = ref["rate_per_hour_of_day"]
    for h in range(CHANGE_H, 24):
        idx = _hour(out, h).index.to_numpy()
        if len(idx) == 0:
            continue
        if kind == "double":
            total = sum(r[h] for r in rates.values())
            if total == 0:
                continue
            have = int((out.loc[idx, "model"] == "planner-7b").sum())
            need = round(2 * rates["planner-7b"][h] / total * len(idx)) - have
            others = idx[(out.loc[idx, "model"] != "planner-7b").to_numpy()]
            if need > 0:
                pick = rng.choice(others, size=min(need, len(others)), replace=False)
                out.iloc[pick, col] = "planner-7b"
        else:
            k = round(0.1 * len(idx))
            if k:
                out.iloc[rng.choice(idx, size=k, replace=False), col] = "new-model"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=1000)
    args = ap.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    used = sorted(set(seeds) & set(CALIBRATION_SEEDS))
    print(
        f"split: thresholds set on seeds {CALIBRATION_SEEDS.start}-{CALIBRATION_SEEDS.stop - 1}; "
        f"scored on seeds {seeds.start}-{seeds.stop - 1}"
        + (f" (WARNING: {len(used)} of them were calibration seeds)" if used else " (none used)")
    )
    spec = default_spec().model_copy(update={"stationary": True, "days": 8})
    false_alarms, windows = 0, 0
    top: dict[str, float] = defaultdict(float)
    hits = {"double": 0, "new": 0}
    for seed in seeds:
        full = synth(spec, seed=seed)
        ref = summarize(full[full["timestamp"] < 7 * 86400])
        day = full[full["timestamp"] >= 7 * 86400].copy()
        day["timestamp"] -= 7 * 86400
        day = day.reset_index(drop=True)
        for h in range(24):
            rep = drift(ref, _hour(day, h))
            windows += 1
            false_alarms += rep.verdict == "drift"
            for sc in rep.scores:
                key = sc.name.split(":")[0]
                top[key] = max(top[key], sc.score)
        for kind in hits:
            rep = drift(ref, _hour(_changed(ref, day, kind, seed), CHANGE_H))
            hits[kind] += rep.verdict == "drift"
    print(f"stationary windows: {windows}, false alarms: {false_alarms}")
    print(
        "largest stationary score per dimension: "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(top.items()))
    )
    print(
        f"first window after the change fires: share doubled {hits['double']}/{args.seeds}, "
        f"new model {hits['new']}/{args.seeds}"
    )
    ok = (
        not used
        and false_alarms <= 0.01 * windows
        and hits["new"] >= 0.95 * args.seeds
        and hits["double"] >= 0.85 * args.seeds
    )
    fields = {
        "split": "heldout_seeds",
        "first_seed": seeds.start,
        "seeds": args.seeds,
        "windows": windows,
        "false_alarms": false_alarms,
        "double_detected": hits["double"],
        "new_model_detected": hits["new"],
    }
    print(f"RESULT {cells(ok, fields)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
