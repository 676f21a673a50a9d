"""Wall time of `optimize` on lab16 with a 10-user, 7-day synthetic trace (issue 5).

Targets: total <= 60 s on a 2-core machine, every MILP solve <= 2 s.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from lab16 import lab16

from planner.cli import inputs
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.search import optimize


def main() -> None:
    inputs.silence_solver_banner()
    t0 = time.perf_counter()
    cl, ms, sl, trace = lab16(seed=0)
    t1 = time.perf_counter()
    cfg = OptimizeConfig()
    res = optimize(cl, ms, sl, trace, cfg, inputs.scorer(trace, sl), clock=time.perf_counter)
    t2 = time.perf_counter()
    solves = [e.milp.solve_s for e in res.evaluations if e.milp is not None]
    print(f"trace: {len(trace)} requests, generated in {t1 - t0:.2f} s")
    print(
        f"evaluations: {len(res.evaluations)} ({sum(e.feasible for e in res.evaluations)} feasible)"
    )
    print(
        f"MILP: total {res.milp_time_s:.2f} s (candidates + build + solve), solver max {max(solves):.2f} s, "
        f"mean {sum(solves) / len(solves):.2f} s"
    )
    print(
        f"simulator: total {res.sim_time_s:.2f} s, {len(trace) * len(res.evaluations) / res.sim_time_s:,.0f} requests/s"
    )
    print(f"search total: {t2 - t1:.2f} s; points: {[p.name for p in res.points]}")
    total = t2 - t0
    print(
        f"RESULT total_s={total:.2f} search_s={t2 - t1:.2f} evals={len(res.evaluations)} "
        f"milp_total_s={res.milp_time_s:.2f} milp_max_solve_s={max(solves):.2f} sim_total_s={res.sim_time_s:.2f} "
        f"points={len(res.points)} total_le_60s={total <= 60} milp_le_2s={max(solves) <= 2.0}"
    )


if __name__ == "__main__":
    main()
