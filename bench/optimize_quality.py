"""Quality of `optimize` against fair baselines, out of sample (issue 13), on each example
cluster (`lab16`, and `edge6`: 7 GPUs of 24 GiB, six models, sparse traffic).

Split. The optimizer holds back 2 days of the example's week (seed 0; its default
`--validate-days`; which ones: `--held-back`, by default optimize's: `week`, Friday and
Sunday; `last`: Saturday and Sunday), fits on the other 5 and chooses its points on those
2 (their names and requests head each example's table); everything below the first table
is scored on the next week, a trace it never saw (seed 1 by default, same spec).
The baselines are sized on the fitted week too (melange's peak demand) and scored on the
unseen one.

Targets (issues 13 and 41), on the unseen week:
- every point beats its `lru@` twin (reactive LRU on the point's own instances within its
  warm GiB; a quiet rung, `for_traffic_share` set, on the unseen week thinned to that share
  of its sessions, as the optimizer judged it): switch P95 at most half the twin's, or both under 0.5 s, at no more warm
  memory (`beats_twin_unseen`; issue 41 item 6; until then: 1/3 of the twin's at its
  attainment - 0.01, which the optimizer still asks of a point on the days it chooses on);
- the selected point meets the attainment target on the held-back days (`predicted`) and
  on the unseen week;
- some point reaches melange's attainment - 0.01 at <= 0.6x melange's warm GiB;
- every baseline can be built (one that cannot is a failure, not a pass).
Exit 1 when a target is missed. `--quick` runs fewer evaluations (a smoke run).
`--unseen-seed N [N ...]` scores other unseen weeks (the points are optimized once; RESULT
then says on how many weeks each target held): seed 1 was read while `handoff_min_share`
(optimizer config) was chosen, seeds 2-8 while the schedule's rule for slow wakes was
(`schedule.fast_wake_s`), seeds 9-32 to find what still misses (21 led to the hand-off rule
of `serving_rule.handoff_displaces_nobody`, 2-32 to the front's rule for tie chains in
`select._front`); 33-44 were first scored after the hand-off rule, 45-56 after both, as
clean checks; 57-64 judged the held-back rules (issue 30 item 2: `spread` and `week` were
designed on 2-7 and scored there once each; `week` as the default, with the fixes that made
it hold, was developed on 2-13 and scored on 57-64 at the end); issue 41 (the ladder, the
twin target above) was judged on 57-64: the waits left on week 60 (an agent session after
hours whose later models woke one by one) led to `handoff_min_share` 0.03, so 57-64 are read
for that rule; 65-72 were then scored once as its check; 73 and above are unread.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from lab16 import EXAMPLES, example

from planner.app import files as inputs
from planner.forkmap import default_workers, fork_map
from planner.optimizer import scoring
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.ladder import thinned
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.search import SearchInputs, optimize
from planner.optimizer.sim.simulator import simulate

HEAD = f"{'point':<22}{'attain':>8}{'switch95 s':>12}{'warm GiB':>10}{'GPUs':>6}"


def _row(name: str, m: dict, waited: int | None = None) -> str:
    return (
        f"{name:<22}{m['slo_attainment']:>8.3f}{m['switch_p95_s']:>12.2f}"
        f"{m['warm_gpu_gib']:>10.1f}{m['gpus_used']:>6}"
        + ("" if waited is None else f"{waited:>8}")
    )


def run(
    name: str, evals: int, unseen_seeds: list[int], held_back: str = OptimizeConfig().held_back
) -> dict[int, dict[str, str]]:
    """Optimize on the example's week once; the targets' verdicts on each unseen week."""
    cl, ms, sl, fit_week = example(name, seed=0)
    cfg = OptimizeConfig(evals=evals, held_back=held_back)
    res = optimize(SearchInputs(cl, ms, sl, fit_week, cfg, job_map=fork_map(default_workers())))
    print(
        f"\n== {name}: fit on {res.fit_requests} requests, points chosen on the "
        f"{res.validate_days} held-back days ({res.held_requests} requests: "
        + ", ".join(f"day {d} {n}" for d, n in res.held_days)
        + ")"
    )
    print(HEAD)
    for p in res.points:
        print(_row(p.name, res.metrics[p.name].to_json()))
    # Baselines sized on the fitted week, as the optimizer was, and scored on the unseen ones.
    built = scoring.build_baselines(cl, ms, sl, fit_week)
    held = "+".join(f"day{d}:{n}" for d, n in res.held_days)  # day from 0: requests
    return {
        s: {f"{name}_held_days": held, **score(name, res, built, example(name, seed=s), s)}
        for s in unseen_seeds
    }


def beats_twin_unseen(m: dict, twin: dict) -> bool:
    """The point beats its twin (issue 41 item 6: `scoring.beats_twin_target`, switch P95 at
    most half the twin's or both under 0.5 s) at no more warm memory than the twin.

    The memory holds by construction: the twin's budget is the point's own time-averaged warm
    GiB (`scoring.twin_result`), so the two hold the same memory unless the twin needs more
    than that to run at all (a point that sleeps most of the day averages less than one
    instance's footprint). Then the twin holds more, and a point faster than it beats it on
    both counts (the check until issue 41's quiet rungs failed that case as if the twin had
    been starved)."""
    return scoring.beats_twin_target(PointMetrics.from_json(m), PointMetrics.from_json(twin))


def score(name: str, res, built, unseen, seed: int) -> dict[str, str]:
    """The targets' verdicts for `res`'s points on one unseen week (`example`'s 4-tuple)."""
    cl, ms, sl, next_week = unseen
    target = sl.attainment
    req = scoring.requests(next_week, ms)
    print(f"-- unseen week (seed {seed}): {len(req)} requests")
    # switch P95 is over the requests that waited for a wake: with a handful of them it is
    # one wake time, so the count says how often a point's agents wait at all
    print(HEAD + f"{'waited':>8}")
    pts, fails = {}, []
    for p in res.points:
        perfs = res.perfs[p.name]
        # a quiet rung is for fallen traffic: judged on the unseen week thinned to its share
        req_p = req
        if p.for_traffic_share:
            req_p = scoring.requests(thinned(next_week, p.for_traffic_share), ms)
        r = simulate(p, perfs, req_p, sl, model_names=ms.names)
        pts[p.name] = m = r.to_metrics()
        tr = scoring.twin_result(
            p,
            perfs,
            r.warm_gpu_gib,
            cl,
            sl,
            req_p,
            ms.names,
            gpu_margin=OptimizeConfig().gpu_memory_margin,
            host_margin=OptimizeConfig().host_memory_margin,
        )
        t = tr.to_metrics()
        ok = beats_twin_unseen(m, t)
        print(_row(p.name, m, int(r.switched.sum())))
        print(
            _row(f"  lru@{p.name}", t, int(tr.switched.sum()))
            + ("" if ok else "   <- not 2x faster than its twin")
        )
        if not ok:
            fails.append(p.name)
        if p.for_traffic_share:  # not comparable with the full week's figures below
            del pts[p.name]
    base = scoring.baseline_metrics(cl, ms, sl, req, built=built)
    for b, m in base.items():
        print(
            f"{b + ' (baseline)':<22}  cannot be built: {m['error']}"
            if "error" in m
            else _row(f"{b} (baseline)", m)
        )
    all_built = all("error" not in m for m in base.values())
    sel = res.selected
    held_ok = res.metrics[sel].slo_attainment >= target
    next_ok = pts[sel]["slo_attainment"] >= target
    mel = base.get("melange", {})
    vs_melange = "error" not in mel and any(
        m["slo_attainment"] >= mel["slo_attainment"] - 0.01
        and m["warm_gpu_gib"] <= 0.6 * mel["warm_gpu_gib"]
        for m in pts.values()
    )
    print(
        f"selected {sel}: attainment {res.metrics[sel].slo_attainment:.3f} on the held-back "
        f"days, {pts[sel]['slo_attainment']:.3f} on the unseen week (target {target}); "
        f"points not 2x faster than their twin: {fails or 'none'}"
    )
    return {
        f"{name}_points": str(len(pts)),
        f"{name}_twins_ok": str(not fails),
        f"{name}_selected_heldout_ok": str(held_ok),
        f"{name}_selected_next_week_ok": str(next_ok),
        f"{name}_vs_melange_ok": str(vs_melange),
        f"{name}_baselines_built": str(all_built),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="8 evaluations per example")
    ap.add_argument(
        "--held-back",
        default=OptimizeConfig().held_back,
        choices=("week", "last", "spread"),
        help="optimize --held-back",
    )
    ap.add_argument(
        "--unseen-seed", type=int, nargs="+", default=[1], help="seeds of the unseen weeks (not 0)"
    )
    args = ap.parse_args()
    seeds = list(dict.fromkeys(args.unseen_seed))
    if 0 in seeds:
        ap.error("--unseen-seed 0 is the week the optimizer fits on")
    inputs.silence_solver_banner()
    weeks: dict[int, dict[str, str]] = {s: {} for s in seeds}
    for name in EXAMPLES:
        for s, verdicts in run(
            name, 8 if args.quick else OptimizeConfig().evals, seeds, args.held_back
        ).items():
            weeks[s].update(verdicts)
    ok_keys = [k for k in weeks[seeds[0]] if k.endswith("_ok") or k.endswith("_built")]
    met = {s: all(w[k] == "True" for k in ok_keys) for s, w in weeks.items()}
    print()
    for s, w in weeks.items():  # every target's verdict on each week
        missed = [k for k in ok_keys if w[k] != "True"]
        verdicts = " ".join(f"{k.removesuffix('_ok')}={w[k]}" for k in ok_keys)
        print(f"week {s}: {'missed ' + ' '.join(missed) if missed else 'met'}; {verdicts}")
    if len(seeds) == 1:  # one week: each target's verdict
        out = {**weeks[seeds[0]], "unseen_seed": str(seeds[0])}
    else:  # several: on how many weeks each target held
        out = {k: f"{sum(w[k] == 'True' for w in weeks.values())}/{len(seeds)}" for k in ok_keys}
        out |= {"unseen_seeds": ",".join(map(str, seeds)), "weeks_met": str(sum(met.values()))}
    out |= {k: v for k, v in weeks[seeds[0]].items() if k.endswith("_held_days")}
    out["held_back"] = args.held_back
    out["met"] = str(all(met.values()))
    print("RESULT " + " ".join(f"{k}={v}" for k, v in out.items()))
    sys.exit(0 if all(met.values()) else 1)


if __name__ == "__main__":
    main()
