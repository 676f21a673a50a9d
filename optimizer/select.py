"""From the search's evaluations to the plan's points.

1. The pool: evaluations meeting the attainment target on the days points are chosen on
   (the held-back days when there are any), else those within 0.02 of the best.
2. Tier variants of the knee of the pool's front are scored too, so that points can share
   its placement and a hop between them is sleeps and wakes (`tiers`); and schedule variants
   of the front's points (at most `SCHEDULED`, spread over warm GiB as `name_points` thins
   them), one per `awake_min_requests_per_h` (`schedule`, with the fitted days' session
   hand-offs: `schedule.handoffs`), with stand-ins declared also ones where the covered
   models keep no awake hours (idle sleep `idle_sleep_s` and `covered_idle_sleep_s`).
3. The front (switch P95, warm GiB and quality cost to lower, attainment over every day to
   raise, differences under `ATTAINMENT_TIE` counting as none) keeps the points distinctly
   better than their own `lru@` twin on the days points are chosen on (`scoring.beats_twin`:
   switch P95 at most a third of the twin's at its attainment - 0.01), on their sum and on
   each held-back day apart (`scoring.beats_twin_each_day`): planned tiers are worth a
   point only where they switch clearly faster than reactive swapping on the same
   instances at the same memory. Where no point is, it keeps those no twin dominates.
3b. The ladder (`ladder`): the variants of the placements of two of the front's points (the
   one that holds the SLO best, the leanest) that differ only in tiers, awake hours and idle
   sleep are scored; the front of one placement's variants, chosen as step 3 chooses,
   becomes the rungs (hops between them restart nothing); the front's points on other
   placements stay only where they pay for their restarts. The selected point is a rung.
   The quiet rungs (`_quiet`; ladder.py step 5): variants of the ladder's placement judged
   on the chosen days thinned to a share of their sessions, written as `quiet-<share %>`
   with `for_traffic_share`, for the adjuster's hours of fallen traffic.
4. Baselines on the fitted days (`select_baselines`): a point one dominates (attainment,
   switch P95, warm GiB) is dropped, and each baseline no point dominates is added as a
   `from-<baseline>` point, where no written point dominates it on the chosen days either.
   4b. Where all leave GPUs idle, a point that uses them (`idle`; never the selected one).
5. Names, the selected point (the rung that holds the SLO best over every day of the trace;
   any point where no rung is left), the capacity table, and the hop between every pair of
   points.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from planner.errors import InfeasibleError
from planner.optimizer import scoring
from planner.optimizer.advice import binding_slo, capacity_fix, explain_capacity
from planner.optimizer.capacity import capacity_report, cluster_capacity_rps
from planner.optimizer.evaluation import Evaluation, SearchResult, predicted
from planner.optimizer.hops import hop_table, placement_key, tier_variants
from planner.optimizer.idle import IDLE_POINT, idle_gpu_point
from planner.optimizer.ladder import (
    QUIET_ATTAINMENT_LOSS,
    QUIET_BATCH,
    QUIET_MIN_SAVING,
    QUIET_SHARES,
    awake_gib_h,
    pays,
    quiet_points,
    rung_points,
    schedule_variant,
    schedule_variants,
    thin,
    thinned,
    tiers_key,
)
from planner.optimizer.pareto import dominates, name_points
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.quality import stand_in_quality_cost
from planner.optimizer.search_context import Evaluator, Job, SearchContext, roomiest_knobs
from planner.optimizer.select_baselines import ATTAINMENT_TIE, baseline_points
from planner.optimizer.sim.request import Requests
from planner.schemas.plan import Point

POOL_SLACK = 0.02  # with no point meeting the target: keep those this close to the best
MAX_POINTS = 6  # points of the front written at most: the rungs, then the ones off the ladder
SCHEDULED = 4  # schedule variants of at most this many front points, spread over warm GiB


TWIN_NOTE_SLOWER = (
    "points that do not switch 3x faster than their lru@ twin (reactive LRU swapping on the "
    "same instances within the same warm GiB) at its attainment - 0.01, on the days points "
    "are chosen on, were left out"
)
# why a ladder has one rung: (its requests wait for no wake already?, does any plan meet
# the attainment target?) -> the note
ONE_RUNG_NOTES = {
    (True, True): "one point on the ladder: its requests wait for no wake already, so keeping "
    "more awake buys no switch latency, and every variant of its placement that keeps less "
    "awake misses the attainment target or waits as long as reactive LRU swapping at its memory",
    (False, True): "one point on the ladder: every variant of its placement that keeps less "
    "awake misses the attainment target or waits as long as reactive LRU swapping at its "
    "memory, and none that keeps more awake switches faster",
    (True, False): "one point on the ladder: no plan meets the attainment target, and every "
    "variant of its placement that keeps less awake attains more than "
    f"{POOL_SLACK:.0%} less than the best plan (the models are too busy to sleep); keeping "
    "more awake buys no switch latency",
    (False, False): "one point on the ladder: no plan meets the attainment target, and every "
    "variant of its placement that keeps less awake attains more than "
    f"{POOL_SLACK:.0%} less than the best plan or waits as long as reactive LRU swapping; "
    "none that keeps more awake switches faster",
}
TWIN_NOTE_DOMINATED = (
    "no point switches 3x faster than its lru@ twin (reactive LRU swapping on the same "
    "instances within the same warm GiB); points whose twin does as well or better were left out"
)


Worth = Callable[[Evaluation, PointMetrics], bool]


def _worth_twins(
    ev: Evaluator, pool: list[Evaluation], worth: Worth
) -> tuple[list[Evaluation], set[int]]:
    """The front of the pool less the points `worth(point, its twin's metrics)` rejects, each
    rejection letting the next best in (the front of what is left); and the rejected."""
    rejected: set[int] = set()
    while True:
        cand = _front([e for e in pool if e.index not in rejected])
        ev.run_twins(cand)
        bad = {e.index for e in cand if not worth(e, ev.twin_metrics(e))}
        if not bad:
            return cand, rejected
        rejected |= bad


def _held_up(e: Evaluation) -> float:
    """The attainment a point can be trusted with: over every day of the trace (the days
    points are chosen on are few, possibly a quiet weekend), weighted by requests."""
    if e.held is None:
        return e.metrics.slo_attainment
    n_fit, n_held = e.metrics.requests, e.held.requests
    met = e.metrics.slo_attainment * n_fit + e.held.slo_attainment * n_held
    return met / max(n_fit + n_held, 1)


def _front(pool: list[Evaluation]) -> list[Evaluation]:
    """Evaluations no other on the front beats: switch P95, warm GiB and quality cost
    (stand-ins) no higher, attainment over every day no lower than `ATTAINMENT_TIE` below,
    and one of them better. A point with more memory stays when it holds the SLO clearly
    better than every leaner point that stays, and the one that holds it best always stays."""
    # Among equal plans the higher attainment comes first and is the one kept.
    pool = sorted(pool, key=lambda e: (-e.chosen.slo_attainment, e.index))
    vals = [
        # the stand-ins' quality cost: the variants' is judged for the idle-GPU point (`idle`)
        (e.chosen.switch_p95_s, e.chosen.warm_gpu_gib, stand_in_quality_cost(e.chosen), _held_up(e))
        for e in pool
    ]

    def beats(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        no_worse = all(x <= y for x, y in zip(a[:3], b[:3], strict=True))
        no_worse = no_worse and a[3] >= b[3] - ATTAINMENT_TIE
        return no_worse and (any(x < y for x, y in zip(a[:3], b[:3], strict=True)) or a[3] > b[3])

    # A point leaves only for one that stays: beats within a tie chain (the leanest beats one
    # 0.004 better, which beats one 0.008 better), and the end of a chain holds the SLO
    # clearly better than the start. Every beater comes earlier in this order.
    order = sorted(
        range(len(pool)), key=lambda i: (vals[i][1], vals[i][0], vals[i][2], -vals[i][3])
    )
    kept: list[int] = []
    seen = set()
    for i in order:
        v = vals[i]
        if v in seen or any(beats(vals[j], v) for j in kept):
            continue
        kept.append(i)
        seen.add(v)
    out = [pool[i] for i in sorted(kept)]
    # Ties chain (each point within ATTAINMENT_TIE of the next, the last far below the first):
    # the one that holds the SLO best stays (to 0.001, then the least switch, memory, quality).
    top = (
        min(
            range(len(pool)),
            key=lambda i: (-round(vals[i][3], 3), vals[i][0], vals[i][1], vals[i][2]),
        )
        if pool
        else None
    )
    if top is not None and vals[top] not in seen:
        out.append(pool[top])
    return out


def _pool(
    feasible: list[Evaluation], target: float, max_quality_cost: float | None = None
) -> tuple[list[Evaluation], bool]:
    """(pool, whether its members meet the target): on the held-back days and, as those may
    be quiet ones (a weekend), on the fitted days too where some point does; and within the
    SLO's max_quality_cost on both where it sets one (and some point is)."""
    if max_quality_cost is not None:
        within = [
            e
            for e in feasible
            if max(stand_in_quality_cost(e.chosen), stand_in_quality_cost(e.metrics))
            <= max_quality_cost + 1e-12
        ]
        feasible = within or feasible
    meeting = [e for e in feasible if e.chosen.slo_attainment >= target - 1e-9]
    both = [e for e in meeting if e.metrics.slo_attainment >= target - 1e-9]
    if both or meeting:
        return both or meeting, True
    top = max(e.chosen.slo_attainment for e in feasible)
    return [e for e in feasible if e.chosen.slo_attainment >= top - POOL_SLACK], False


def _knee(front: list[Evaluation]) -> Evaluation:
    named = dict(name_points(front, _warm, _switch))
    return named.get("balanced") or next(iter(named.values()))


def _warm(e: Evaluation) -> float:
    return e.chosen.warm_gpu_gib


def _switch(e: Evaluation) -> float:
    return e.chosen.switch_p95_s


def _add(ev: Evaluator, evals: list[Evaluation], feasible: list[Evaluation], jobs: list[Job]):
    """Score `jobs` as the next evaluations; they join `evals` and `feasible`."""
    done = ev.evaluate_points(len(evals), jobs)
    evals += done
    feasible += done


def _tier_jobs(ctx: SearchContext, pool: list[Evaluation]) -> list[Job]:
    """Step 2: tier variants of the knee of the pool's front."""
    knee = _knee(_front(pool))
    cfg = ctx.cfg
    tiers = tier_variants(
        knee.point,
        ctx.demand,
        ctx.sleep_order,
        ctx.cluster,
        gpu_margin=cfg.gpu_memory_margin,
        host_margin=cfg.host_memory_margin,
    )
    return [(knee.knobs, v, knee.perfs, "tiers") for v in tiers]


def _schedule_jobs(ctx: SearchContext, pool: list[Evaluation]) -> list[Job]:
    """Step 2: schedule variants of (at most `SCHEDULED`) front points; with stand-ins
    declared, also variants where the covered models keep no awake hours, and sleep sooner
    when idle (a stand-in answers while they wake again)."""
    cfg = ctx.cfg
    variants = schedule_variants(ctx)
    seeds = [e for e in _front(pool) if e.origin != "schedule"]
    return [
        (
            e.knobs,
            schedule_variant(ctx, e.point, e.perfs, rate, asleep, idle_s),
            e.perfs,
            "schedule",
        )
        for _, e in name_points(seeds, _warm, _switch, SCHEDULED)
        for rate in cfg.awake_min_requests_per_h
        for asleep, idle_s in variants
    ]


def _twin_front(
    ctx: SearchContext, ev: Evaluator, pool: list[Evaluation], notes: list[str]
) -> list[Evaluation]:
    """Step 3: the points distinctly better than their lru@ twin (reactive swapping at their
    memory), else none the twin dominates, else the pool's front."""
    front = _front(pool)
    if not ctx.cfg.baselines:
        return front
    worths: list[tuple[Worth, str]] = [
        (lambda e, t: scoring.beats_twin(e.chosen, t) and _each_day(ev, e), TWIN_NOTE_SLOWER),
        (lambda e, t: not dominates(t, e.chosen), TWIN_NOTE_DOMINATED),
    ]
    for worth, why in worths:
        cand, rejected = _worth_twins(ev, pool, worth)
        if cand:
            if rejected & {e.index for e in front}:
                notes.append(why)
            return cand
    return front


def _ladder(
    ctx: SearchContext,
    ev: Evaluator,
    evals: list[Evaluation],
    feasible: list[Evaluation],
    front: list[Evaluation],
) -> tuple[list[Evaluation], list[Evaluation]]:
    """Step 3b (`ladder`): (the rungs on the placement of one of the front's bases, the
    front's points on other placements that pay for their restarts)."""
    if not front:
        return [], []
    bases: dict[tuple, Evaluation] = {}  # placement -> its base point, one per placement
    for b in (min(front, key=_base_rank), min(front, key=lambda e: (_warm(e), e.index))):
        bases.setdefault(placement_key(b.point), b)
    scored = {(placement_key(e.point), tiers_key(e.point)) for e in feasible}
    jobs = [
        (b.knobs, p, b.perfs, "ladder")
        for key, b in bases.items()
        for p in rung_points(ctx, b.point, b.perfs)
        if (key, tiers_key(p)) not in scored  # a schedule variant step 2 scored already
    ]
    _add(ev, evals, feasible, jobs)
    pool, _ = _pool(feasible, ctx.slo.attainment, ctx.slo.max_quality_cost)
    ladders = []
    for key, b in bases.items():
        same = [e for e in pool if placement_key(e.point) == key]
        if not any(e is b for e in same):
            same.append(b)
        rungs = _twin_front(ctx, ev, same, [])
        top = min(rungs, key=_base_rank)
        ladders.append((thin(rungs, _warm, top), top, key))
    # at least two rungs preferred; then, among the ladders whose top rung holds the SLO as
    # well as the best one's (`ATTAINMENT_TIE`), the leanest top: the least warm memory
    # within the targets
    best = max(_held_up(top) for _, top, _ in ladders)
    rungs, _, key = min(
        ladders,
        key=lambda lt: (
            -min(len(lt[0]), 2),
            _held_up(lt[1]) < best - ATTAINMENT_TIE,
            _warm(lt[1]),
            lt[1].index,
        ),
    )
    judged = [(r.point, r.chosen, _held_up(r), r.perfs) for r in rungs]
    price = ctx.cfg.restart_price_gib_h
    off = [
        e
        for e in front
        if placement_key(e.point) != key
        and pays(e.point, e.chosen, _held_up(e), e.perfs, judged, price)
    ]
    # as many points as the front had before the ladder (`name_points`): the rungs first
    return rungs, thin(off, _warm, most=max(MAX_POINTS - len(rungs), 0))


def _quiet(
    ctx: SearchContext, ev: Evaluator, evals: list[Evaluation], rungs: list[Evaluation]
) -> list[tuple[str, Evaluation, PointMetrics]]:
    """The quiet rungs (ladder.py step 5): (name, evaluation on the thinned days, its `lru@`
    twin's metrics there), at most one per share of `QUIET_SHARES`, each leaner than the
    last. They join `evals` (their `chosen` figures are the thinned days')."""
    if not rungs:
        return []
    top = min(rungs, key=_base_rank)
    days = ctx.held if ctx.held is not None else ctx.fit
    target = ctx.slo.attainment
    limit = ctx.slo.default.switch_p95_s or math.inf
    out: list[tuple[str, Evaluation, PointMetrics]] = []
    # the leanest rung at full traffic stands for every rung's warm GiB on the thinned days
    lean = min(rungs, key=lambda e: (_warm(e), e.index))
    lean_gib_h = min(awake_gib_h(e.point) for e in rungs)
    full = scoring.requests(days, ctx.models)  # a quiet rung is also judged at all the traffic
    for share in QUIET_SHARES:
        req = scoring.requests(thinned(days, share), ctx.models)
        # the top rung first (its attainment there is the bar), the leanest, the quiet rung
        # of the larger share: what a quiet rung must keep clearly less than
        refs = list({id(e): e for e in [top, lean, *(q for _, q, _ in out)]}.values())
        written = {tiers_key(e.point) for e in [*rungs, *refs]}
        # only variants fitted to the fallen traffic whose schedule keeps less awake than
        # every rung's, leanest first: the first batch with one that holds ends the search
        cands = [
            p
            for p in quiet_points(ctx, top.point, top.perfs, share)
            if tiers_key(p) not in written and awake_gib_h(p) < lean_gib_h
        ]
        ref_ms = ev.score_on(req, [(e.point, e.perfs) for e in refs])
        # a quiet rung keeps clearly less than every one of them on the thinned days
        most = (1.0 - QUIET_MIN_SAVING) * min(m.warm_gpu_gib for m in ref_ms)
        # and holds the SLO about as well as the ladder's top rung does there
        least = max(target, ref_ms[0].slo_attainment - QUIET_ATTAINMENT_LOSS)
        for start in range(0, len(cands), QUIET_BATCH):
            batch = cands[start : start + QUIET_BATCH]
            ms = ev.score_on(req, [(p, top.perfs) for p in batch])
            ok = sorted(
                (m.warm_gpu_gib, m.switch_p95_s, k)
                for k, m in enumerate(ms)
                if m.slo_attainment >= least - 1e-9
                and m.switch_p95_s <= limit
                and m.warm_gpu_gib <= most
            )
            kept = _quiet_kept(ctx, ev, req, top, [(batch[k], ms[k]) for _, _, k in ok])
            if kept is not None:
                p, m, twin = kept
                p = p.model_copy(update={"for_traffic_share": share})
                p.predicted = predicted(m)
                # what the adjuster reads how far the traffic may rise on it from
                p.predicted_full = predicted(ev.score_on(full, [(p, top.perfs)])[0])
                e = Evaluation(len(evals), top.knobs, None, p, top.perfs, m, origin="quiet")
                evals.append(e)
                out.append((f"quiet-{round(share * 100)}", e, twin))
                break
    ev.evaluated(len(evals))
    return out


def _quiet_kept(
    ctx: SearchContext,
    ev: Evaluator,
    req: Requests,
    top: Evaluation,
    ok: list[tuple[Point, PointMetrics]],
) -> tuple[Point, PointMetrics, PointMetrics] | None:
    """The leanest of `ok` that beats its `lru@` twin on `req` (as `_twin_front` asks), with
    its twin's metrics; a twin is simulated only for the candidates tried."""
    for p, m in ok:
        if not ctx.cfg.baselines:
            return p, m, m
        twin = ev.twin_on(req, p, top.perfs, m.warm_gpu_gib)
        if scoring.beats_twin_target(m, twin) and twin.warm_gpu_gib <= m.warm_gpu_gib + 1e-6:
            return p, m, twin
    return None


def _base_rank(e: Evaluation) -> tuple[float, float, float, int]:
    """The ladder's base comes first: it holds the SLO best over every day (to 0.001), then
    switches least, then keeps least warm."""
    return (-round(_held_up(e), 3), e.chosen.switch_p95_s, e.chosen.warm_gpu_gib, e.index)


def _each_day(ev: Evaluator, e: Evaluation) -> bool:
    """`e` beats its twin on each held-back day apart (`scoring.beats_twin_each_day`)."""
    return scoring.beats_twin_each_day(ev.twin_days(e))


def _selected(named: list[tuple[str, Evaluation]]) -> str:
    """The one that holds the SLO best over every day (to 0.001), then the knee, then the
    least switch and warm memory."""
    return max(
        named,
        key=lambda ne: (
            round(_held_up(ne[1]), 3),
            ne[0] == "balanced",
            -ne[1].chosen.switch_p95_s,
            -ne[1].chosen.warm_gpu_gib,
        ),
    )[0]


def select_points(ctx: SearchContext, ev: Evaluator, evals: list[Evaluation]) -> SearchResult:
    """See the module docstring."""
    feasible = [e for e in evals if e.feasible]
    if not feasible:
        raise InfeasibleError(
            "no placement satisfies memory and capacity for any setting tried: "
            + explain_capacity(ctx, ev.candidates(roomiest_knobs(ctx.cfg))),
            fix=capacity_fix(ctx.models),
        )
    target, max_q = ctx.slo.attainment, ctx.slo.max_quality_cost
    notes: list[str] = []
    # 2. tier variants of the knee's placement, then schedule variants of the front
    _add(ev, evals, feasible, _tier_jobs(ctx, _pool(feasible, target, max_q)[0]))
    _add(ev, evals, feasible, _schedule_jobs(ctx, _pool(feasible, target, max_q)[0]))
    pool, meets = _pool(feasible, target, max_q)
    if not meets:
        top = max(pool, key=lambda e: e.chosen.slo_attainment).chosen
        notes.append(
            f"no plan meets the attainment target {target:.1%}; best reached "
            f"{top.slo_attainment:.1%}. Binding: {binding_slo(top, ctx.slo)}"
        )
    # 3. the twins; 3b. the ladder; 4. baselines on the fitted days
    front = _twin_front(ctx, ev, pool, notes)
    rungs, off = _ladder(ctx, ev, evals, feasible, front)
    quiet = _quiet(ctx, ev, evals, rungs)
    front, extra, shown = baseline_points(ctx, ev, rungs + off, evals)
    if not front and not extra:  # every point dominated and no baseline buildable: keep best
        front = [max(pool, key=lambda e: (e.chosen.slo_attainment, -e.index))]
    # 4b. the idle GPUs' point; 5. names, capacity, hops
    shown_ok = [m for m in shown.values() if not isinstance(m, str)]
    roomy = idle_gpu_point(ctx, ev, front + extra, evals, shown_ok)
    choices = name_points(front, _warm, _switch, MAX_POINTS) if front else []
    choices += [(e.origin, e) for e in extra]  # the selected point is one of these
    named = choices + ([(IDLE_POINT, roomy)] if roomy is not None else [])
    # the selected point is a rung of the ladder where one is written: the adjuster walks
    # from it by sleeps and wakes
    on_ladder = [(n, e) for n, e in choices if any(e is r for r in rungs)]
    if len(on_ladder) == 1:  # say why the runtime has nowhere to hop by sleeps and wakes
        no_wait = on_ladder[0][1].chosen.switch_p95_s == 0
        notes.append(ONE_RUNG_NOTES[(no_wait, meets)])
    selected = _selected(on_ladder or choices)
    return _result(ctx, ev, evals, named, notes, shown, selected, quiet)


def _result(
    ctx: SearchContext,
    ev: Evaluator,
    evals: list[Evaluation],
    named: list[tuple[str, Evaluation]],
    notes: list[str],
    shown: dict[str, PointMetrics | str],
    selected: str,
    quiet: list[tuple[str, Evaluation, PointMetrics]],
) -> SearchResult:
    """Step 5: the named points (`selected` among them) and the quiet rungs (`_quiet`), the
    capacity table, twins and hops."""
    twins: dict[str, PointMetrics] = {}
    if ctx.cfg.baselines:
        ev.run_twins([e for _, e in named])
        twins = {n: ev.twin_metrics(e) for n, e in named}
        twins |= {n: t for n, _, t in quiet}  # on their thinned days
    named = named + [(n, e) for n, e, _ in quiet]
    points, perfs = [], {}
    for name, e in named:
        p = e.point.model_copy(deep=True)
        p.name = name
        p.notes = list(notes)
        if e.held is not None:
            p.predicted_fit = predicted(e.metrics)
        points.append(p)
        perfs[name] = e.perfs
    cap = capacity_report(
        ctx.trace,
        cluster_capacity_rps(ctx.cluster, ev.candidates(roomiest_knobs(ctx.cfg)), ctx.models.names),
    )
    return SearchResult(
        evaluations=evals,
        points=points,
        selected=selected,
        notes=notes,
        milp_time_s=sum(e.milp_s for e in evals),
        sim_time_s=sum(e.sim_s for e in evals),
        milp_max_s=max((e.milp.solve_s for e in evals if e.milp), default=0.0),
        knobs={n: e.knobs for n, e in named},
        metrics={n: e.chosen for n, e in named},
        metrics_fit={n: e.metrics for n, e in named},
        baselines=shown,
        twins=twins,
        capacity=cap,
        hops=hop_table(points, perfs),
        perfs=perfs,
        validate_days=ctx.validate_days,
        fit_requests=len(ctx.fit_req),
        held_requests=len(ctx.held_req) if ctx.held_req is not None else 0,
        held_days=ctx.held_days,
    )
