"""Quality of `optimize` on lab16 against the three baselines, same simulator, same trace (issue 5).

Checks: the selected point meets the attainment target; some Pareto point has P95 switch
latency <= 1/3 of lru's (or both zero) at no more warm GPU memory; some Pareto point dominates
static on (attainment, switch P95, warm GiB) or static does not fit; on a second trace (another
seed and a changed spec, not optimized on) the selected point's attainment stays >= target - 1%.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from lab16 import LAB16, lab16

from planner.cli import inputs
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.search import optimize
from planner.optimizer.sim.simulator import simulate
from planner.optimizer.workload.synth import bind_models, synth


def main() -> None:
    inputs.silence_solver_banner()
    cl, ms, sl, trace = lab16(seed=0)
    res = optimize(cl, ms, sl, trace, OptimizeConfig(), inputs.scorer(trace, sl))
    base = inputs.baseline_metrics(cl, ms, sl, trace, None)
    target = sl.attainment
    pts = {}
    for p in res.points:
        ev = next(
            e for e in res.evaluations if e.point is not None and e.point.instances == p.instances
        )
        pts[p.name] = ev
    print(f"{'point':<20}{'attain':>8}{'switch95 s':>12}{'warm GiB':>10}{'GPUs':>6}")
    for name, ev in pts.items():
        m = ev.metrics
        print(
            f"{name:<20}{m['slo_attainment']:>8.3f}{m['switch_p95_s']:>12.2f}{m['warm_gpu_gib']:>10.1f}{m['gpus_used']:>6}"
        )
    for name, m in base.items():
        if "error" in m:
            print(f"{name + ' (baseline)':<20}  cannot be built: {m['error']}")
            continue
        print(
            f"{name + ' (baseline)':<20}{m['slo_attainment']:>8.3f}{m['switch_p95_s']:>12.2f}"
            f"{m['warm_gpu_gib']:>10.1f}{m['gpus_used']:>6}"
        )

    sel = pts[res.selected].metrics
    selected_ok = sel["slo_attainment"] >= target

    lru = base["lru"]
    vs_lru = (
        any(
            (
                m["switch_p95_s"] <= lru["switch_p95_s"] / 3
                or (m["switch_p95_s"] == 0 and lru["switch_p95_s"] == 0)
            )
            and m["warm_gpu_gib"] <= lru["warm_gpu_gib"]
            for m in (e.metrics for e in pts.values())
        )
        if "error" not in lru
        else True
    )

    static = base["static"]
    if "error" in static:
        print("static does not fit: " + static["error"])
        dominates_static = True
    else:

        def dom(m):
            no_worse = (
                m["slo_attainment"] >= static["slo_attainment"]
                and m["switch_p95_s"] <= static["switch_p95_s"]
                and m["warm_gpu_gib"] <= static["warm_gpu_gib"]
            )
            better = (
                m["slo_attainment"] > static["slo_attainment"]
                or m["switch_p95_s"] < static["switch_p95_s"]
                or m["warm_gpu_gib"] < static["warm_gpu_gib"]
            )
            return no_worse and better

        dominates_static = any(dom(e.metrics) for e in pts.values())

    # A trace the plan was not optimized on: another seed, more users, stronger morning coding.
    spec = inputs.synth_spec(LAB16 / "workload.yaml").model_copy(
        update={"users": 12, "morning_coding_boost": 2.0, "adoption_day": 3}
    )
    spec, _ = bind_models(spec, ms.names)
    trace2 = synth(spec, seed=7)
    sel_pt = next(p for p in res.points if p.name == res.selected)
    m2 = simulate(sel_pt, pts[res.selected].perfs, trace2, sl, model_names=ms.names).to_metrics()
    holdout_ok = m2["slo_attainment"] >= target - 0.01
    print(
        f"held-out trace ({len(trace2)} requests, seed 7, 12 users): selected point attainment "
        f"{m2['slo_attainment']:.3f} (target {target})"
    )
    best_switch = min(e.metrics["switch_p95_s"] for e in pts.values())
    print(
        f"RESULT points={len(pts)} selected={res.selected} selected_attainment={sel['slo_attainment']:.4f} "
        f"target={target} selected_ok={selected_ok} lru_switch_p95_s={lru.get('switch_p95_s', -1):.3f} "
        f"lru_warm_gib={lru.get('warm_gpu_gib', -1):.1f} best_switch_p95_s={best_switch:.3f} "
        f"beats_lru={vs_lru} dominates_static={dominates_static} "
        f"holdout_attainment={m2['slo_attainment']:.4f} holdout_ok={holdout_ok}"
    )


if __name__ == "__main__":
    main()
