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
   switch P95 at most a third of the twin's at its attainment - 0.01): planned tiers are
   worth a point only where they switch clearly faster than reactive swapping on the same
   instances at the same memory. Where no point is, it keeps those no twin dominates.
4. Baselines on the fitted days: a point one dominates (attainment, switch P95, warm GiB)
   is dropped, and each baseline no point dominates is added as a `from-<baseline>` point,
   so the set is at least as good as anything the tool itself knows; but only where no
   written point dominates it on the days points are chosen on either (attainment
   differences under `ATTAINMENT_TIE` counting as none: `_real_choices`).
   4b. Where all leave GPUs idle, a point that uses them (`idle`; never the selected one).
5. Names, the selected point (the one that holds the SLO best over every day of the trace),
   the capacity table, and the hop between every pair of points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.errors import InfeasibleError
from planner.optimizer import scoring
from planner.optimizer.advice import explain_capacity
from planner.optimizer.candidates import Knobs
from planner.optimizer.capacity import capacity_report, cluster_capacity_rps
from planner.optimizer.evaluation import Evaluation, SearchResult, predicted
from planner.optimizer.idle import IDLE_POINT, idle_gpu_point
from planner.optimizer.invariants import memory_violations
from planner.optimizer.pareto import dominates, name_points
from planner.optimizer.quality import baselines_quality, stand_in_quality_cost
from planner.optimizer.schedule import scheduled
from planner.optimizer.sim.perfs import perfs_for_point
from planner.optimizer.tiers import hop_table, tier_variants

if TYPE_CHECKING:
    from planner.optimizer.search import Searcher

POOL_SLACK = 0.02  # with no point meeting the target: keep those this close to the best
ATTAINMENT_TIE = 0.005  # attainment differences below this count as none on the front
SCHEDULED = 4  # schedule variants of at most this many front points, spread over warm GiB


TWIN_NOTE_SLOWER = (
    "points that do not switch 3x faster than their lru@ twin (reactive LRU swapping on the "
    "same instances within the same warm GiB) at its attainment - 0.01, on the days points "
    "are chosen on, were left out"
)
TWIN_NOTE_DOMINATED = (
    "no point switches 3x faster than its lru@ twin (reactive LRU swapping on the same "
    "instances within the same warm GiB); points whose twin does as well or better were left out"
)


def _worth_twins(S: Searcher, pool: list[Evaluation], worth) -> tuple[list[Evaluation], set[int]]:
    """The front of the pool less the points `worth(point, its twin's metrics)` rejects, each
    rejection letting the next best in (the front of what is left); and the rejected."""
    rejected: set[int] = set()
    while True:
        cand = _front([e for e in pool if e.index not in rejected])
        S.run_twins(cand)
        bad = {e.index for e in cand if not worth(e, S.twin_metrics(e))}
        if not bad:
            return cand, rejected
        rejected |= bad


def _held_up(e: Evaluation) -> float:
    """The attainment a point can be trusted with: over every day of the trace (the days
    points are chosen on are few, possibly a quiet weekend), weighted by requests."""
    if e.held is None:
        return e.metrics["slo_attainment"]
    n_fit, n_held = e.metrics["requests"], e.held["requests"]
    met = e.metrics["slo_attainment"] * n_fit + e.held["slo_attainment"] * n_held
    return met / max(n_fit + n_held, 1)


def _front(pool: list[Evaluation]) -> list[Evaluation]:
    """Evaluations no other on the front beats: switch P95, warm GiB and quality cost
    (stand-ins) no higher, attainment over every day no lower than `ATTAINMENT_TIE` below,
    and one of them better. A point with more memory stays when it holds the SLO clearly
    better than every leaner point that stays, and the one that holds it best always stays."""
    # Among equal plans the higher attainment comes first and is the one kept.
    pool = sorted(pool, key=lambda e: (-e.chosen["slo_attainment"], e.index))
    vals = [
        (
            e.chosen["switch_p95_s"],
            e.chosen["warm_gpu_gib"],
            stand_in_quality_cost(e.chosen),  # the variants' quality: the idle-GPU point's
            _held_up(e),
        )
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


def _tie_beats(a: dict[str, Any], b: dict[str, Any], quality=stand_in_quality_cost) -> bool:
    """`a` dominates `b` at the simulator's resolution: attainment differences under
    `ATTAINMENT_TIE` count as none (a few requests of the days points are chosen on), switch
    P95, warm GiB and `quality` (the stand-ins', as on the front; the variants' is judged for
    the idle-GPU point) as computed."""
    x = [a["switch_p95_s"], a["warm_gpu_gib"], quality(a)]
    y = [b["switch_p95_s"], b["warm_gpu_gib"], quality(b)]
    no_worse = all(p <= q for p, q in zip(x, y, strict=True))
    no_worse = no_worse and a["slo_attainment"] >= b["slo_attainment"] - ATTAINMENT_TIE
    better = any(p < q for p, q in zip(x, y, strict=True))
    return no_worse and (better or a["slo_attainment"] > b["slo_attainment"] + ATTAINMENT_TIE)


def _real_choices(
    front: list[Evaluation], extra: list[Evaluation], shown: dict[str, dict[str, Any]]
) -> list[Evaluation]:
    """The baseline-built points no written point dominates (issue 30 item 5) on the days
    points are chosen on (`chosen`) as well as on the fitted ones, ties at the simulator's
    resolution (`_tie_beats`), nor another baseline as the table shows it (`shown`); among
    themselves the one that holds the SLO best, then the leanest, is judged first."""
    kept: list[Evaluation] = []
    order = sorted(extra, key=lambda e: (-e.chosen["slo_attainment"], _warm(e), e.index))
    for e in order:
        if any(_tie_beats(o.chosen, e.chosen) or dominates(o.metrics, e.metrics) for o in front):
            continue
        if any(_tie_beats(o.chosen, e.chosen) for o in kept):
            continue
        others = [m for n, m in shown.items() if "error" not in m and f"from-{n}" != e.origin]
        if any(_tie_beats(m, e.chosen) for m in others):  # another baseline, as shown
            continue
        kept.append(e)
    return sorted(kept, key=lambda e: e.index)


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
    meeting = [e for e in feasible if e.chosen["slo_attainment"] >= target - 1e-9]
    both = [e for e in meeting if e.metrics["slo_attainment"] >= target - 1e-9]
    if both or meeting:
        return both or meeting, True
    top = max(e.chosen["slo_attainment"] for e in feasible)
    return [e for e in feasible if e.chosen["slo_attainment"] >= top - POOL_SLACK], False


def _knee(front: list[Evaluation]) -> Evaluation:
    named = dict(name_points(front, _warm, _sw_warm_switch))
    return named.get("balanced") or next(iter(named.values()))


def _warm(e: Evaluation) -> float:
    return e.chosen["warm_gpu_gib"]


def _sw_warm_switch(e: Evaluation) -> float:
    return e.chosen["switch_p95_s"]


def _from_baseline(S: Searcher, name: str, b: Any, res: Any, index: int) -> Evaluation:
    """A plan point built from a baseline: its instances; a reactive baseline's instances go
    to the gpu tier where the memory invariant lets every one of them stay awake."""
    point = b.point.model_copy(deep=True)
    point.name = f"from-{name}"
    point.notes = []
    if b.policy == "lru":
        awake = point.model_copy(
            update={"instances": [i.model_copy(update={"tier": "gpu"}) for i in point.instances]}
        )
        if not memory_violations(awake, S.cluster, gpu_margin=S.cfg.gpu_memory_margin):
            point = awake
    perfs = perfs_for_point(point, S.cluster, S.models, S.calib) if S.calib else dict(b.perfs)
    return S.evaluate_point(index, Knobs(), point, perfs, origin=f"from-{name}")


def select_points(S: Searcher, evals: list[Evaluation]) -> SearchResult:
    """See the module docstring."""
    from planner.optimizer.advice import binding_slo, capacity_fix

    feasible = [e for e in evals if e.feasible]
    if not feasible:
        raise InfeasibleError(
            "no placement satisfies memory and capacity for any setting tried: "
            + explain_capacity(S),
            fix=capacity_fix(S.models),
        )
    target = S.slo.attainment
    notes: list[str] = []

    # 2. tier variants of the knee's placement
    max_q = S.slo.max_quality_cost
    pool, _ = _pool(feasible, target, max_q)
    knee = _knee(_front(pool))
    tiers = tier_variants(
        knee.point,
        S.demand,
        S.sleep_order,
        S.cluster,
        gpu_margin=S.cfg.gpu_memory_margin,
        host_margin=S.cfg.host_memory_margin,
    )
    done = S.evaluate_points(len(evals), [(knee.knobs, v, knee.perfs, "tiers") for v in tiers])
    evals += done
    feasible += done
    pool, _ = _pool(feasible, target, max_q)
    # with stand-ins declared, also variants where the covered models keep no awake hours,
    # and sleep sooner when idle (a stand-in answers while they wake again)
    variants = [(frozenset(), S.cfg.idle_sleep_s)]
    if S.substitutes:
        covered = frozenset(S.substitutes)
        idle = sorted({S.cfg.idle_sleep_s, S.cfg.covered_idle_sleep_s}, reverse=True)
        variants += [(covered, s) for s in idle]
    seeds = [e for e in _front(pool) if e.origin != "schedule"]
    jobs = [
        (
            e.knobs,
            scheduled(
                e.point,
                e.perfs,
                S.rates,
                S.cluster,
                min_requests_per_h=rate,
                switch_factor=scoring.TWIN_SWITCH_FACTOR,
                idle_sleep_s=idle_s,
                host_margin=S.cfg.host_memory_margin,
                no_hours_for=asleep,
                handoff=S.handoff,
            ),
            e.perfs,
            "schedule",
        )
        for _, e in name_points(seeds, _warm, _sw_warm_switch, SCHEDULED)
        for rate in S.cfg.awake_min_requests_per_h
        for asleep, idle_s in variants
    ]
    done = S.evaluate_points(len(evals), jobs)
    evals += done
    feasible += done
    pool, meets = _pool(feasible, target, max_q)
    if not meets:
        top = max(e.chosen["slo_attainment"] for e in pool)
        notes.append(
            f"no plan meets the attainment target {target:.1%}; best reached {top:.1%}. "
            f"Binding: {binding_slo(max(pool, key=lambda e: e.chosen['slo_attainment']).chosen, S.slo)}"
        )

    # 3. points distinctly better than their lru@ twin (reactive swapping at their memory),
    # else none the twin dominates
    front = _front(pool)
    if S.cfg.baselines:
        for worth, why in (
            (lambda e, t: scoring.beats_twin(e.chosen, t), TWIN_NOTE_SLOWER),
            (lambda e, t: not dominates(t, e.chosen), TWIN_NOTE_DOMINATED),
        ):
            cand, rejected = _worth_twins(S, pool, worth)
            if cand:
                front = cand
                if rejected & {e.index for e in _front(pool)}:
                    notes.append(why)
                break

    # 4. baselines on the fitted days
    built = scoring.build_baselines(S.cluster, S.models, S.slo, S.fit) if S.cfg.baselines else {}
    base_fit: dict[str, dict[str, Any]] = {}
    base_res: dict[str, Any] = {}
    for name, b in built.items():
        if isinstance(b, str):
            base_fit[name] = {"error": b}
            continue
        r = scoring.simulate_baseline(b, S.fit_req, S.slo, S.models, S.cluster, S.calib)
        base_res[name] = r
        base_fit[name] = r.to_metrics()
    base_fit = baselines_quality(base_fit, built, S.models)
    ok = {n: m for n, m in base_fit.items() if "error" not in m}
    base_shown = base_fit  # as the table shows them: on the held-back days where there are some
    if S.held_req is not None and built:
        base_shown = scoring.baselines_on(built, S.held_req, S.slo, S.models, S.cluster, S.calib)
        base_shown = baselines_quality(base_shown, built, S.models)
    shown_ok = [m for m in base_shown.values() if "error" not in m]
    kept = [
        e
        for e in front
        if not any(dominates(m, e.metrics) for m in ok.values())
        and not any(_tie_beats(m, e.chosen) for m in shown_ok)  # as the table shows them
    ]
    front = kept or front[:0]
    extra: list[Evaluation] = []
    for name, m in ok.items():
        if any(dominates(e.metrics, m) for e in front):
            continue
        ev = _from_baseline(S, name, built[name], base_res[name], len(evals))
        evals.append(ev)
        extra.append(ev)
    extra = _real_choices(front, extra, base_shown)
    if not front and not extra:  # every point dominated and no baseline buildable: keep best
        front = [max(pool, key=lambda e: (e.chosen["slo_attainment"], -e.index))]

    roomy = idle_gpu_point(S, front + extra, evals, target, shown_ok, _tie_beats)  # 4b

    # 5. names, capacity, hops
    named = name_points(front, _warm, _sw_warm_switch) if front else []
    choices = named + [(e.origin, e) for e in extra]  # the selected point is one of these
    named = choices + ([(IDLE_POINT, roomy)] if roomy is not None else [])
    points, knobs, metrics, metrics_fit, perfs = [], {}, {}, {}, {}
    for name, ev in named:
        knobs[name] = ev.knobs
        metrics[name] = ev.chosen
        metrics_fit[name] = ev.metrics
        p = ev.point.model_copy(deep=True)
        p.name = name
        p.notes = list(notes)
        if ev.held is not None:
            p.predicted_fit = predicted(ev.metrics)
        points.append(p)
        perfs[name] = ev.perfs
    # the one that holds the SLO best over every day (to 0.001), then the knee, then the
    # least switch and warm memory
    selected = max(
        choices,
        key=lambda ne: (
            round(_held_up(ne[1]), 3),
            ne[0] == "balanced",
            -ne[1].chosen["switch_p95_s"],
            -ne[1].chosen["warm_gpu_gib"],
        ),
    )[0]
    cap = capacity_report(
        S.trace,
        cluster_capacity_rps(S.cluster, S.candidates(S.roomiest_knobs()), S.models.names),
    )
    twins: dict[str, dict[str, Any]] = {}
    if S.cfg.baselines:
        S.run_twins([ev for _, ev in named])
        twins = {n: S.twin_metrics(ev) for n, ev in named}
    return SearchResult(
        evaluations=evals,
        points=points,
        selected=selected,
        notes=notes,
        milp_time_s=sum(e.milp_s for e in evals),
        sim_time_s=sum(e.sim_s for e in evals),
        milp_max_s=max((e.milp.solve_s for e in evals if e.milp), default=0.0),
        knobs=knobs,
        metrics=metrics,
        metrics_fit=metrics_fit,
        baselines=base_shown,
        twins=twins,
        capacity=cap,
        hops=hop_table(points, perfs),
        perfs=perfs,
        validate_days=S.validate_days,
        fit_requests=len(S.fit_req),
        held_requests=len(S.held_req) if S.held_req is not None else 0,
        held_days=S.held_days,
    )
