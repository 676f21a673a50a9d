"""Speed of the workload generator and of its characterization (issue 3).

Generates 10 users x 7 days with the default spec, characterizes it (full, with per-user
switch matrices), and reports rows/s of each (median of REPEATS runs, after one warm-up).
Targets: generation >= 200k rows/s; characterization of the week <= 2 s.

    python bench/workload_speed.py [--users 10] [--days 7] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from planner.optimizer.workload.characterize import summarize
from planner.optimizer.workload.synth import synth
from planner.optimizer.workload.synth_spec import default_spec

GEN_TARGET_ROWS_PER_S = 200_000
CHAR_TARGET_S = 2.0


def _median_time(fn, repeats: int) -> tuple[float, object]:
    out = fn()  # warm-up: imports, caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    spec = default_spec().model_copy(update={"users": args.users, "days": args.days})
    gen_s, df = _median_time(lambda: synth(spec, seed=args.seed), args.repeats)
    rows = len(df)
    char_s, summary = _median_time(lambda: summarize(df, full=True), args.repeats)

    gen_rate = rows / gen_s
    char_rate = rows / char_s
    print(
        f"trace: {args.users} users x {args.days} days = {rows} requests, "
        f"{df['session'].nunique()} sessions, {len(summary['models'])} models"
    )
    print(
        f"generation:       {gen_s * 1000:8.1f} ms  {gen_rate:12,.0f} rows/s  "
        f"(target >= {GEN_TARGET_ROWS_PER_S:,})"
    )
    print(
        f"characterization: {char_s * 1000:8.1f} ms  {char_rate:12,.0f} rows/s  "
        f"(target <= {CHAR_TARGET_S:.1f} s)"
    )
    # A bigger team shows how generation scales (vectorised: per-call cost, not per-user).
    big = default_spec().model_copy(update={"users": 200, "days": args.days})
    big_s, big_df = _median_time(lambda: synth(big, seed=args.seed), 1)
    print(
        f"generation, 200 users: {len(big_df)} requests in {big_s:.2f} s "
        f"= {len(big_df) / big_s:,.0f} rows/s"
    )
    gen_ok, char_ok = gen_rate >= GEN_TARGET_ROWS_PER_S, char_s <= CHAR_TARGET_S
    print(
        f"RESULT rows={rows} gen_s={gen_s:.4f} gen_rows_per_s={gen_rate:.0f} "
        f"char_s={char_s:.4f} char_rows_per_s={char_rate:.0f} "
        f"gen_rows_per_s_200users={len(big_df) / big_s:.0f} "
        f"gen_target_met={gen_ok} char_target_met={char_ok}"
    )
    if not (gen_ok and char_ok):
        sys.exit(1)


if __name__ == "__main__":
    main()
