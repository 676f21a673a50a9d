"""Step 4 of `select`: the plan's points against the baselines on the fitted days.

A point a baseline dominates (attainment, switch P95, warm GiB) is dropped, and each baseline
no point dominates is added as a `from-<baseline>` point, so the set is at least as good as
anything the tool itself knows; but only where no written point dominates it on the days
points are chosen on either (attainment differences under `ATTAINMENT_TIE` counting as none:
`_real_choices`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from planner.optimizer import scoring
from planner.optimizer.baselines import Baseline
from planner.optimizer.candidates import Knobs
from planner.optimizer.evaluation import Evaluation
from planner.optimizer.invariants import memory_violations
from planner.optimizer.pareto import dominates
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.quality import baselines_quality, stand_in_quality_cost
from planner.optimizer.search_context import Evaluator, SearchContext
from planner.optimizer.sim.perfs import perfs_for_point

ATTAINMENT_TIE = 0.005  # attainment differences below this count as none on the front


def tie_beats(
    a: PointMetrics,
    b: PointMetrics,
    quality: Callable[[PointMetrics], float] = stand_in_quality_cost,
) -> bool:
    """`a` dominates `b` at the simulator's resolution: attainment differences under
    `ATTAINMENT_TIE` count as none (a few requests of the days points are chosen on), switch
    P95, warm GiB and `quality` (the stand-ins', as on the front; the variants' is judged for
    the idle-GPU point) as computed."""
    x = (a.switch_p95_s, a.warm_gpu_gib, quality(a))
    y = (b.switch_p95_s, b.warm_gpu_gib, quality(b))
    no_worse = all(p <= q for p, q in zip(x, y, strict=True))
    no_worse = no_worse and a.slo_attainment >= b.slo_attainment - ATTAINMENT_TIE
    better = any(p < q for p, q in zip(x, y, strict=True))
    return no_worse and (better or a.slo_attainment > b.slo_attainment + ATTAINMENT_TIE)


def _real_choices(
    front: list[Evaluation], extra: list[Evaluation], shown: Mapping[str, PointMetrics | str]
) -> list[Evaluation]:
    """The baseline-built points no written point dominates (issue 30 item 5) on the days
    points are chosen on (`chosen`) as well as on the fitted ones, ties at the simulator's
    resolution (`tie_beats`), nor another baseline as the table shows it (`shown`); among
    themselves the one that holds the SLO best, then the leanest, is judged first."""
    kept: list[Evaluation] = []
    order = sorted(extra, key=lambda e: (-e.chosen.slo_attainment, e.chosen.warm_gpu_gib, e.index))
    for e in order:
        if any(tie_beats(o.chosen, e.chosen) or dominates(o.metrics, e.metrics) for o in front):
            continue
        if any(tie_beats(o.chosen, e.chosen) for o in kept):
            continue
        others = [m for n, m in shown.items() if not isinstance(m, str) and f"from-{n}" != e.origin]
        if any(tie_beats(m, e.chosen) for m in others):  # another baseline, as shown
            continue
        kept.append(e)
    return sorted(kept, key=lambda e: e.index)


def _from_baseline(
    ctx: SearchContext, ev: Evaluator, name: str, b: Baseline, index: int
) -> Evaluation:
    """A plan point built from a baseline: its instances; a reactive baseline's instances go
    to the gpu tier where the memory invariant lets every one of them stay awake."""
    point = b.point.model_copy(deep=True)
    point.name = f"from-{name}"
    point.notes = []
    if b.policy.reactive:
        awake = point.model_copy(
            update={"instances": [i.model_copy(update={"tier": "gpu"}) for i in point.instances]}
        )
        if not memory_violations(awake, ctx.cluster, gpu_margin=ctx.cfg.gpu_memory_margin):
            point = awake
    perfs = (
        perfs_for_point(point, ctx.cluster, ctx.models, ctx.calib) if ctx.calib else dict(b.perfs)
    )
    return ev.evaluate_point(index, Knobs(), point, perfs, origin=f"from-{name}")


def baseline_points(
    ctx: SearchContext, ev: Evaluator, front: list[Evaluation], evals: list[Evaluation]
) -> tuple[list[Evaluation], list[Evaluation], dict[str, PointMetrics | str]]:
    """Step 4: (the front less the points a baseline dominates, the `from-<baseline>` points
    worth adding, the baselines as the table shows them)."""
    built = (
        scoring.build_baselines(ctx.cluster, ctx.models, ctx.slo, ctx.fit)
        if ctx.cfg.baselines
        else {}
    )
    base_fit: dict[str, PointMetrics | str] = {}
    for name, b in built.items():
        base_fit[name] = (
            b
            if isinstance(b, str)
            else scoring.simulate_baseline(
                b, ctx.fit_req, ctx.slo, ctx.models, ctx.cluster, ctx.calib
            ).point_metrics()
        )
    base_fit = baselines_quality(base_fit, built, ctx.models)
    ok = {n: m for n, m in base_fit.items() if not isinstance(m, str)}
    shown = base_fit  # as the table shows them: on the held-back days where there are some
    if ctx.held_req is not None and built:
        shown = scoring.baselines_on(
            built, ctx.held_req, ctx.slo, ctx.models, ctx.cluster, ctx.calib
        )
        shown = baselines_quality(shown, built, ctx.models)
    shown_ok = [m for m in shown.values() if not isinstance(m, str)]
    kept = [
        e
        for e in front
        if not any(dominates(m, e.metrics) for m in ok.values())
        and not any(tie_beats(m, e.chosen) for m in shown_ok)  # as the table shows them
    ]
    extra: list[Evaluation] = []
    for name, m in ok.items():
        if any(dominates(e.metrics, m) for e in kept):
            continue
        b = built[name]
        assert not isinstance(b, str)
        made = _from_baseline(ctx, ev, name, b, len(evals))
        evals.append(made)
        extra.append(made)
    return kept, _real_choices(kept, extra, shown), shown
