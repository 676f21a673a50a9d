"""`planner adjust` on a week of drifting traffic vs the best single point held all week.

1. Traffic: the lab16 workload (10 developers, 7 days) with its drift: mornings favour
   coding and afternoons review (diurnal), reasoner-30b is adopted on day 2, and a third
   of the users move their coder calls onto the reasoner from day 4. A stationary version of
   the same spec (no drift, every day a working day) serves as the planning trace and as
   the no-hop check.
2. Plan: `planner optimize` (in-process, fixed seed) on the stationary week, on the cluster
   of bench/data/adjust/cluster.yaml (lab16 is large enough to keep every model awake,
   which leaves nothing to adjust); its points are the Pareto set the adjuster hops between.
3. Replay (adjuster/replay.py, 1 h windows, the default AdjustConfig) of the drifting week
   and of a second stationary week (another seed): the adjusted series, every point held
   all week, the hops. Day 0 of the drifting week is the adjuster's warm-up: it decides on
   it (the drift alarms that start tracking, the day of history its forecast reads, as a
   live adjuster finds in the request log) but every series is scored on days 1-6 only.
   The figures with day 0 scored too are printed (and in RESULT, `all_days_` keys).

4. Scenario 2, "re-optimize when needed": the plan the team had on day 2 (optimized on
   days 0-1, before the adoption) replayed with `--reoptimize auto`: when no point meets the
   SLO in two consecutive windows, optimize runs on the last 24 h (same seed, 8 evaluations)
   and its points join the plan; compared with that first plan's point held all week.

5. Scenario 3, "a real trace's shape": a week whose hourly rates have the shape of the Azure
   2023 code and conversation traces (bench/lib/realweek.py: each model its own slice of a
   trace, fine buckets onto hours, scaled to the lab16 team's volume), planned on its day 0
   only, adjusted with `--reoptimize auto` (its busy days carry 3x day 0's traffic: only a
   re-plan on the traffic seen so far can serve them) and scored on all seven days.
   Targets (exit 1 when missed): the adjusted switch P95 is at most that of every point held
   all week whose warm GiB is at most the adjusted run's; attainment at least the SLO's
   target; at most 3 hops a day. The share of hops that are sleeps and wakes only is
   reported, and what planning alone reaches (RESULT `real_oracle_attainment`: a plan made
   on the whole week, held; `real_nightly_attainment`: a nightly re-plan on the previous
   day): the oracle shows the target is feasible on this cluster. `--only real` runs just
   this scenario.

6. Scenario 4, "an overload week planned on day 0" (issue 30 item 6): three times the team
   on the same drifting spec, bursts beyond the cluster, planned on day 0, `--reoptimize
   auto`; targets: adjusted attainment >= the selected point held all week - 0.002, and
   switch P95 <= max(2x held, held + 1 s). RESULT keys `overload_...`.

7. Issue 41, weeks of our own making planned on their day 0 on lab16 (bench/lib/leanweeks.py,
   which states the targets): a falling-traffic week (a quarter of the sessions from
   Wednesday noon) and a mix-shift week; RESULT keys `falling_...`, `mix_...`.
   `--only falling mix` runs just those; `--plot FILE.png` draws the falling week's replay.

Every plan here comes from the one optimize pipeline (`planner.app.plans.optimize_plan`),
as `planner optimize` makes it (held-back days by its config, no scorer).

"Best single point at equal or lower warm memory": among the points held all week that meet
the attainment target and whose time-average warm memory is at most the adjusted run's, the
one with the lowest switch P95 (adjusting beats it when its switch P95 is lower: no single
point gives that latency for that memory). When no point qualifies, the one with the lowest
objective J = switch P95 + gib_weight_s x warm GiB (the policy's own trade-off) among those
meeting the target. The table lists every point with its J.

    python bench/adjust_replay.py [--evals 16] [--cluster bench/data/adjust/cluster.yaml]

Ends with `RESULT real_...=.. adjusted_switch_p95_s=.. best_static_switch_p95_s=.. adjusted_warm_gib=..
best_static_warm_gib=.. adjusted_attainment=.. max_hops_per_day=.. stationary_hops=..
reopt_...=.. falling_...=.. mix_...=.. target_met=..` (the reopt_ keys: scenario 2).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from leanweeks import (
    FALL_S,
    common_checks,
    falling_week,
    gib_h_after,
    mix_week,
    nightly_gib_h,
)
from realweek import real_week
from result import targets

from planner.adjuster.policy import AdjustConfig, objective_s
from planner.adjuster.policy_types import DAY_S
from planner.adjuster.replay import replay
from planner.app import files as inp
from planner.app.plans import OptimizeInputs, config_from_plan, optimize_plan
from planner.app.replay_plot import draw_replay
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.sim.perfs import perfs_for_point
from planner.optimizer.workload.synth import synth
from planner.optimizer.workload.synth_spec import bind_models
from planner.schemas.plan import Plan

ROOT = Path(__file__).resolve().parents[1]
LAB16 = ROOT / "plans" / "examples" / "lab16"
DATA = ROOT / "bench" / "data" / "adjust"
WARMUP_S = 86400.0


def _j(m: dict, acfg: AdjustConfig) -> float:
    """The policy's objective J of a replayed series (its switch P95 as simulated), s."""
    return objective_s(m["switch_p95_s"], m["warm_gpu_gib"], acfg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", type=int, default=16, help="optimizer evaluations")
    ap.add_argument("--cluster", type=Path, default=DATA / "cluster.yaml")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--only",
        nargs="+",
        choices=["main", "real", "falling", "mix"],
        default=["main", "falling", "mix"],
        help="scenarios to run: main (1-4), real (3 alone), falling, mix (bench/lib/leanweeks.py)",
    )
    ap.add_argument("--plot", type=Path, help="draw the falling week's replay (.png)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    cl = inp.cluster(args.cluster)
    ms = inp.models(LAB16 / "models.yaml")
    sl = inp.slo(LAB16 / "slo.yaml")
    spec, _ = bind_models(inp.synth_spec(LAB16 / "workload.yaml"), ms.names)
    week = synth(spec, seed=args.seed)
    stat_spec = spec.model_copy(update={"stationary": True})
    plan_trace = synth(stat_spec, seed=args.seed)
    check_trace = synth(stat_spec, seed=args.seed + 1)

    inp.silence_solver_banner()
    cfg = OptimizeConfig(evals=args.evals, seed=args.seed)

    def plan_for(trace, cluster=cl) -> Plan:
        """`planner optimize` on `trace`, as a plan: the one optimize pipeline, in-process."""
        return optimize_plan(OptimizeInputs(cluster, ms, sl, trace), cfg)[0]

    lab_cl = inp.cluster(LAB16 / "cluster.yaml")
    lean = {}
    if "falling" in args.only:
        lean["falling"] = falling_scenario(lab_cl, ms, sl, spec, lambda t: plan_for(t, lab_cl))
        if args.plot is not None:
            draw_replay(args.plot, lean["falling"]["out"], "falling-traffic week, planned on day 0")
    if "mix" in args.only:
        lean["mix"] = mix_scenario(lab_cl, ms, sl, spec, lambda t: plan_for(t, lab_cl))
    if "real" in args.only and "main" not in args.only:
        lean["real"] = real_week_scenario(cl, ms, sl, week, plan_for, args.seed)
    if "main" not in args.only:
        ok = all(x["ok"] for x in lean.values())
        print(f"RESULT {' '.join(x['result'] for x in lean.values())} target_met={int(ok)}")
        sys.exit(0 if ok else 1)

    plan = plan_for(plan_trace)
    t_opt = time.perf_counter() - t0
    print(
        f"plan: {len(plan.points)} points {[p.name for p in plan.points]}, selected {plan.selected} "
        f"(optimize {t_opt:.0f} s on {len(plan_trace)} requests)"
    )
    perfs = {p.name: perfs_for_point(p, cl, ms) for p in plan.points}

    acfg = AdjustConfig()
    t1 = time.perf_counter()
    out = replay(plan, week, sl, perfs, acfg, warmup_s=WARMUP_S)
    whole = replay(plan, week, sl, perfs, acfg)["adjusted"]
    still = replay(plan, check_trace, sl, perfs, acfg)
    t_rep = time.perf_counter() - t1

    rows = {"adjusted": out["adjusted"], **{f"static {k}": v for k, v in out["static"].items()}}
    print(
        f"\ndrifting week: {len(week)} requests, {out['windows']} windows of 1 h, scored from day 1 "
        f"(replay {t_rep:.0f} s)"
    )
    print(
        f"{'series':28} {'attain':>7} {'switch P95 s':>12} {'wakes':>7} {'warm GiB':>9} {'TTFT P95 s':>10} {'J s':>7}"
    )
    for name, m in rows.items():
        print(
            f"{name:28} {m['slo_attainment']:7.3f} {m['switch_p95_s']:12.2f} {m['switch_count']:7d} "
            f"{m['warm_gpu_gib']:9.1f} {m['ttft_p95_s']:10.2f} {_j(m, acfg):7.2f}"
        )
    print("\nhops:")
    for h in out["hops"]:
        d, hh = divmod(h["at_s"] / 3600.0, 24)
        kind = "sleep/wake only" if h["tiers_only"] else f"{h['restarts']} restart(s)"
        print(f"  day {int(d)} {hh:05.2f} h  {h['from']} -> {h['to']} [{kind}]: {h['reason']}")
    for a in out["actions"]:
        print(f"  {a['kind']} at {a['at_s'] / 3600:.0f} h: {a['reason']}")

    a = out["adjusted"]
    ok = {k: v for k, v in out["static"].items() if v["slo_attainment"] >= sl.attainment}
    cheaper = {k: v for k, v in ok.items() if v["warm_gpu_gib"] <= a["warm_gpu_gib"]}
    if cheaper:
        best, rule = (
            min(cheaper, key=lambda k: (cheaper[k]["switch_p95_s"], k)),
            "equal_or_lower_warm",
        )
    else:
        pool = ok or out["static"]
        best, rule = min(pool, key=lambda k: (_j(pool[k], acfg), k)), "lowest_objective"
    b = out["static"][best]
    j_best = min(ok or out["static"], key=lambda k: (_j(out["static"][k], acfg), k))
    print(f"\nlowest objective single point: {j_best}")
    print(
        f"best single point ({rule}): {best}; adjusted vs it: switch P95 {a['switch_p95_s']:.2f} vs "
        f"{b['switch_p95_s']:.2f} s, warm {a['warm_gpu_gib']:.1f} vs {b['warm_gpu_gib']:.1f} GiB, "
        f"attainment {a['slo_attainment']:.3f} (target {sl.attainment})"
    )
    print(
        f"adjusted with day 0 scored too: switch P95 {whole['switch_p95_s']:.2f} s, warm "
        f"{whole['warm_gpu_gib']:.1f} GiB, attainment {whole['slo_attainment']:.3f}"
    )
    print(f"stationary week: {len(check_trace)} requests, {len(still['hops'])} hops")

    # Scenario 2: the plan the team had on day 2 (optimized on days 0-1, before the
    # adoption), adjusted with --reoptimize auto (optimize on the last 24 h, fewer evals).
    early = week[week["timestamp"] < 2 * 86400.0]
    plan2 = plan_for(early)
    perfs2 = {p.name: perfs_for_point(p, cl, ms) for p in plan2.points}
    rcfg = OptimizeConfig(evals=acfg.reoptimize_evals, seed=args.seed)

    def new_points(window):
        points = optimize_plan(OptimizeInputs(cl, ms, sl, window), rcfg)[0].points
        return points, {p.name: perfs_for_point(p, cl, ms) for p in points}

    reoptimizer = SimpleNamespace(points=new_points)  # the replay's ReoptimizePolicy

    acfg2 = acfg.model_copy(update={"reoptimize": "auto"})
    out2 = replay(plan2, week, sl, perfs2, acfg2, reoptimizer=reoptimizer)
    a2 = out2["adjusted"]
    best2 = min(out2["static"], key=lambda k: (_j(out2["static"][k], acfg), k))
    b2 = out2["static"][best2]
    print(f"\nplan made on days 0-1 ({[p.name for p in plan2.points]}), --reoptimize auto:")
    for name, m in {
        "adjusted": a2,
        **{f"static {k}": v for k, v in out2["static"].items()},
    }.items():
        print(
            f"{name:28} {m['slo_attainment']:7.3f} {m['switch_p95_s']:12.2f} {m['switch_count']:7d} "
            f"{m['warm_gpu_gib']:9.1f} {m['ttft_p95_s']:10.2f} {_j(m, acfg):7.2f}"
        )
    for x in out2["actions"]:
        d, hh = divmod(x["at_s"] / 3600.0, 24)
        print(
            f"  day {int(d)} {hh:05.2f} h  {x['kind']}: {x['reason']} {x.get('added_points', '')}"
        )
    for h in out2["hops"]:
        d, hh = divmod(h["at_s"] / 3600.0, 24)
        print(f"  day {int(d)} {hh:05.2f} h  {h['from']} -> {h['to']}: {h['reason']}")
    real = real_week_scenario(cl, ms, sl, week, plan_for, args.seed)
    over = overload_scenario(cl, ms, sl, spec, plan_for, acfg2, reoptimizer, args.seed)
    print(f"total {time.perf_counter() - t0:.0f} s")
    print(
        f"RESULT {' '.join(x['result'] for x in lean.values())} "
        f"{real['result']} {over['result']} adjusted_switch_p95_s={a['switch_p95_s']:.3f} best_static_switch_p95_s={b['switch_p95_s']:.3f} "
        f"adjusted_warm_gib={a['warm_gpu_gib']:.2f} best_static_warm_gib={b['warm_gpu_gib']:.2f} "
        f"adjusted_attainment={a['slo_attainment']:.4f} max_hops_per_day={out['max_hops_per_day']} "
        f"hops={len(out['hops'])} tiers_only_hops={out['tiers_only_hops']} "
        f"stationary_hops={len(still['hops'])} best_static={best} best_static_rule={rule} "
        f"all_days_adjusted_switch_p95_s={whole['switch_p95_s']:.3f} "
        f"all_days_adjusted_warm_gib={whole['warm_gpu_gib']:.2f} "
        f"reopt_adjusted_attainment={a2['slo_attainment']:.4f} reopt_static_attainment={b2['slo_attainment']:.4f} "
        f"reopt_adjusted_switch_p95_s={a2['switch_p95_s']:.3f} reopt_static_switch_p95_s={b2['switch_p95_s']:.3f} "
        f"reopt_adjusted_warm_gib={a2['warm_gpu_gib']:.2f} reopt_static_warm_gib={b2['warm_gpu_gib']:.2f} "
        f"reopt_runs={sum(x['kind'] == 'reoptimize' for x in out2['actions'])} "
        f"reopt_max_hops_per_day={out2['max_hops_per_day']} "
        f"target_met={int(real['ok'] and over['ok'] and all(x['ok'] for x in lean.values()))}"
    )

    ok = real["ok"] and over["ok"] and all(x["ok"] for x in lean.values())
    if not ok:
        sys.exit(1)


def planned_on_day0(cl, ms, sl, week, plan_for, acfg) -> tuple:
    """(the plan made on the week's day 0, the replay of the week with `acfg`)."""
    plan = plan_for(week[week["timestamp"] < 86400.0])
    perfs = {p.name: perfs_for_point(p, cl, ms) for p in plan.points}
    return plan, replay(plan, week, sl, perfs, acfg)


def falling_scenario(cl, ms, sl, spec, plan_for) -> dict:
    """The falling-traffic week (bench/lib/leanweeks.py), planned on day 0, on lab16."""
    week = falling_week(spec)
    acfg = AdjustConfig()
    plan, out = planned_on_day0(cl, ms, sl, week, plan_for, acfg)

    def replay_held(pl, trace):
        pf = {p.name: perfs_for_point(p, cl, ms) for p in pl.points}
        return replay(pl, trace, sl, pf, acfg.model_copy(update={"max_hops_per_day": 0}))

    held = replay_held(plan, week)
    print(
        f"\nfalling week (a quarter of the sessions from {FALL_S / 3600:.0f} h): {len(week)} "
        f"requests, planned on day 0 ({[p.name for p in plan.points]}, selected "
        f"{plan.selected}), scored on days 0-6"
    )
    print_replay(out, acfg)
    a, h = out["adjusted"], held["adjusted"]
    gib_a, gib_h = gib_h_after(out, FALL_S), gib_h_after(held, FALL_S)
    gib_n, att_n = nightly_gib_h(week, plan_for, replay_held, FALL_S)
    saved = 1.0 - gib_a / gib_h if gib_h else 0.0
    limit = sl.default.switch_p95_s or float("inf")
    print(
        f"  warm GiB-h after the fall: adjusted {gib_a:.0f}, held {plan.selected} {gib_h:.0f} "
        f"({saved:.0%} less), nightly re-plan {gib_n:.0f} (its attainment {att_n:.4f})"
    )
    checks = {
        "falling: warm GiB-h after the fall >= 30% below held": saved >= 0.30,
        "falling: attainment >= held - 0.002": a["slo_attainment"] >= h["slo_attainment"] - 0.002,
        f"falling: switch P95 <= {limit:.0f} s (the SLO's)": a["switch_p95_s"] <= limit,
        "falling: fewer warm GiB-h after the fall than a nightly re-plan": gib_a < gib_n,
        **common_checks(out, plan, "falling"),
    }
    ok = targets(checks)
    result = (
        f"falling_gib_h_after={gib_a:.0f} falling_held_gib_h_after={gib_h:.0f} "
        f"falling_nightly_gib_h_after={gib_n:.0f} falling_saved={saved:.3f} "
        f"falling_attainment={a['slo_attainment']:.4f} "
        f"falling_held_attainment={h['slo_attainment']:.4f} "
        f"falling_switch_p95_s={a['switch_p95_s']:.2f} falling_hops={len(out['hops'])} "
        f"falling_tiers_only_hops={out['tiers_only_hops']} "
        f"falling_max_hops_per_day={out['max_hops_per_day']} falling_target_met={int(ok)}"
    )
    return {"ok": ok, "result": result, "out": out}


def mix_scenario(cl, ms, sl, spec, plan_for) -> dict:
    """The mix-shift week (bench/lib/leanweeks.py), planned on day 0, on lab16."""
    week = mix_week(spec)
    acfg = AdjustConfig()
    plan, out = planned_on_day0(cl, ms, sl, week, plan_for, acfg)
    print(
        f"\nmix-shift week (half the coder calls to the reasoner from day 2): {len(week)} "
        f"requests, planned on day 0 ({[p.name for p in plan.points]}), scored on days 0-6"
    )
    print_replay(out, acfg)
    ok = targets(common_checks(out, plan, "mix"))
    a = out["adjusted"]
    result = (
        f"mix_attainment={a['slo_attainment']:.4f} mix_switch_p95_s={a['switch_p95_s']:.2f} "
        f"mix_warm_gib={a['warm_gpu_gib']:.1f} mix_hops={len(out['hops'])} "
        f"mix_max_hops_per_day={out['max_hops_per_day']} mix_target_met={int(ok)}"
    )
    return {"ok": ok, "result": result, "out": out}


OVERLOAD_USERS = 3  # x the lab16 team: bursts beyond what the four L40S serve


def overload_scenario(cl, ms, sl, spec, plan_for, acfg, reoptimizer, seed: int) -> dict:
    """Scenario 4 (issue 30 item 6): the drifting week of three times the team, whose bursts
    exceed the cluster, planned on its day 0 and adjusted with `--reoptimize auto`, scored on
    all seven days against the plan's selected point held all week. Targets: adjusted
    attainment >= held - 0.002 and switch P95 <= max(2 x held, held + 1 s): hops that do not
    pay for themselves make things worse, not better."""
    big = spec.model_copy(update={"users": spec.users * OVERLOAD_USERS})
    week = synth(big, seed=seed)
    plan = plan_for(week[week["timestamp"] < 86400.0])
    perfs = {p.name: perfs_for_point(p, cl, ms) for p in plan.points}
    out = replay(plan, week, sl, perfs, acfg, reoptimizer=reoptimizer)
    a, h = out["adjusted"], out["static"][plan.selected]
    print(
        f"\noverload week ({big.users} users, bursts beyond the cluster): {len(week)} requests, "
        f"planned on day 0 ({[p.name for p in plan.points]}, selected {plan.selected}), "
        "scored on days 0-6"
    )
    print_replay(out, acfg)
    sw_cap = max(2 * h["switch_p95_s"], h["switch_p95_s"] + 1.0)
    checks = {
        f"attainment >= held {plan.selected} - 0.002": a["slo_attainment"]
        >= h["slo_attainment"] - 0.002,
        f"switch P95 <= {sw_cap:.2f} s (max(2x held, held + 1 s))": a["switch_p95_s"] <= sw_cap,
    }
    ok = targets(checks)
    result = (
        f"overload_adjusted_attainment={a['slo_attainment']:.4f} "
        f"overload_held_attainment={h['slo_attainment']:.4f} "
        f"overload_adjusted_switch_p95_s={a['switch_p95_s']:.3f} "
        f"overload_held_switch_p95_s={h['switch_p95_s']:.3f} "
        f"overload_hops={len(out['hops'])} overload_reopt_runs={len(out['reoptimizations'])} "
        f"overload_target_met={int(ok)}"
    )
    return {"ok": ok, "result": result}


def print_replay(out: dict, acfg) -> None:
    """The replay's table (adjusted and every point held all week), hops and re-optimizations."""
    a = out["adjusted"]
    for name, m in {"adjusted": a, **{f"static {k}": v for k, v in out["static"].items()}}.items():
        print(
            f"{name:28} {m['slo_attainment']:7.3f} {m['switch_p95_s']:12.2f} {m['switch_count']:7d} "
            f"{m['warm_gpu_gib']:9.1f} {m['ttft_p95_s']:10.2f} {_j(m, acfg):7.2f}"
        )
    for x in out["hops"]:
        d, hh = divmod(x["at_s"] / 3600.0, 24)
        kind = "sleep/wake only" if x["tiers_only"] else f"{x['restarts']} restart(s)"
        print(f"  day {int(d)} {hh:05.2f} h  {x['from']} -> {x['to']} [{kind}]: {x['reason']}")
    for x in out["reoptimizations"]:
        d, hh = divmod(x["at_s"] / 3600.0, 24)
        print(f"  day {int(d)} {hh:05.2f} h  reoptimize: {x['reason']} {x.get('added_points', '')}")


def plan_reoptimizer(plan: Plan, cl, ms, sl, evals: int) -> SimpleNamespace:
    """The replay's ReoptimizePolicy for `plan`, as `adjust --reoptimize auto` builds it
    (app/reoptimize.py): the one optimize pipeline under the config the plan records
    (`config_from_plan`), with the policy's evaluation budget."""
    rcfg = config_from_plan(plan, evals=evals)

    def new_points(window):
        points = optimize_plan(OptimizeInputs(cl, ms, sl, window), rcfg)[0].points
        return points, {p.name: perfs_for_point(p, cl, ms) for p in points}

    return SimpleNamespace(points=new_points)


def real_bounds(cl, ms, sl, week, plan_for, day0_plan: Plan) -> dict[str, float]:
    """What planning alone reaches on the real-shape week, each plan's selected point held:
    an oracle planned on the whole week (it sees the future) and a nightly re-plan (day d
    held at the point a plan made on day d - 1 selects; day 0 at the day-0 plan's)."""
    held = AdjustConfig(max_hops_per_day=0)

    def replay_held(pl, trace):
        pf = {p.name: perfs_for_point(p, cl, ms) for p in pl.points}
        return replay(pl, trace, sl, pf, held)

    oracle = plan_for(week)
    o = replay_held(oracle, week)["static"][oracle.selected]
    print(
        f"  oracle (planned on all 7 days): {oracle.selected} of {[p.name for p in oracle.points]}"
        f" held all week: attainment {o['slo_attainment']:.4f}, switch P95 "
        f"{o['switch_p95_s']:.2f} s, {o['warm_gpu_gib']:.1f} GiB"
    )
    day0 = week[week["timestamp"] < DAY_S]
    _, att_later = nightly_gib_h(week, plan_for, replay_held, 0.0)
    att0 = replay_held(day0_plan, day0)["adjusted"]["slo_attainment"]
    nightly = (att0 * len(day0) + att_later * (len(week) - len(day0))) / len(week)
    print(
        f"  nightly re-plan on the previous day: attainment {nightly:.4f} (days 1-6 {att_later:.4f})"
    )
    return {"oracle": o["slo_attainment"], "nightly": nightly}


def real_week_scenario(cl, ms, sl, synth_week, plan_for, seed: int) -> dict:
    """Scenario 3: a week whose hourly rates have a real trace's shape (bench/lib/realweek.py),
    planned on its first day, adjusted with `--reoptimize auto` (the team that plans once and
    lets adjust re-plan when the traffic outgrows the plan; re-optimizations see only the
    last 24 h, never a later hour, through the plan's own optimize config), scored on all
    seven days. Targets: the adjusted switch P95 is at most that of every point held all week
    whose warm GiB is at most the adjusted run's, attainment at least the SLO's target, at
    most 3 hops a day.

    The attainment target is feasible: an oracle plan made on the whole week (same cluster,
    same pipeline) held all week reaches 0.969 (seed 0). Planning alone does not: a nightly
    re-plan on the previous day reaches 0.944 (busy and quiet days alternate, so yesterday
    is the wrong day), the day-0 plan's points held all week 0.942. Both bounds are printed
    and in RESULT (`real_oracle_attainment`, `real_nightly_attainment`); only the adjusted
    run is judged."""
    hours = 7 * 24
    rates = (synth_week.groupby("model").size() / hours).to_dict()  # the lab16 team's volume
    week = real_week(rates, {m.name: m.max_context for m in ms.models}, seed=seed)
    plan = plan_for(week[week["timestamp"] < DAY_S])
    perfs = {p.name: perfs_for_point(p, cl, ms) for p in plan.points}
    acfg = AdjustConfig(reoptimize="auto")
    reoptimizer = plan_reoptimizer(plan, cl, ms, sl, acfg.reoptimize_evals)
    out = replay(plan, week, sl, perfs, acfg, reoptimizer=reoptimizer)
    a = out["adjusted"]
    print(
        f"\nreal-shape week (Azure 2023 code/conv rate shapes, tests/data): {len(week)} requests, "
        f"planned on day 0 ({[p.name for p in plan.points]}, selected {plan.selected}), "
        "scored on days 0-6"
    )
    print_replay(out, acfg)
    bound = real_bounds(cl, ms, sl, week, plan_for, plan)
    cheaper = {k: v for k, v in out["static"].items() if v["warm_gpu_gib"] <= a["warm_gpu_gib"]}
    worse_than = [k for k, v in cheaper.items() if a["switch_p95_s"] > v["switch_p95_s"] + 1e-9]
    n_hops = len(out["hops"])
    share = out["tiers_only_hops"] / n_hops if n_hops else 0.0
    checks = {
        "switch P95 <= every point held at <= its warm GiB": not worse_than,
        f"attainment >= {sl.attainment}": a["slo_attainment"] >= sl.attainment,
        "<= 3 hops a day": out["max_hops_per_day"] <= 3,
    }
    ok = targets(checks)
    if worse_than:
        print(f"  points held all week with a lower switch P95 at <= its memory: {worse_than}")
    print(f"  hops: {n_hops}, sleep/wake only: {out['tiers_only_hops']} ({share:.0%})")
    result = (
        f"real_adjusted_switch_p95_s={a['switch_p95_s']:.3f} real_adjusted_warm_gib="
        f"{a['warm_gpu_gib']:.2f} real_adjusted_attainment={a['slo_attainment']:.4f} "
        f"real_oracle_attainment={bound['oracle']:.4f} "
        f"real_nightly_attainment={bound['nightly']:.4f} "
        f"real_cheaper_points={len(cheaper)} real_beaten_by={len(worse_than)} "
        f"real_hops={n_hops} real_max_hops_per_day={out['max_hops_per_day']} "
        f"real_reopt_runs={len(out['reoptimizations'])} "
        f"real_tiers_only_share={share:.2f} real_target_met={int(ok)}"
    )
    return {"ok": ok, "result": result}


if __name__ == "__main__":
    main()
