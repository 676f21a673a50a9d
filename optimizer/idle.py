"""Points that use the GPUs the front leaves idle (issue 30 item 5).

The search prices warm memory and GPUs used, so on a cluster with more GPUs than the
traffic needs its front packs every model, quantized and partly asleep, onto a few GPUs
and leaves the rest idle. Where every written point leaves a GPU idle, one more placement is
solved with memory and GPUs nearly free: the MILP then buys quality (the least quantized
variants that fit, by the models' shares of requests) and keeps every model awake (no
sleepers, no switches), at the memory that costs. It is offered beside the front, not
selected, where no written point already gives at least its quality and switching.
"""

from __future__ import annotations

from dataclasses import replace

from planner.optimizer.evaluation import Evaluation
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.quality import quality_cost
from planner.optimizer.search_context import Evaluator, SearchContext
from planner.optimizer.select_baselines import tie_beats

IDLE_POINT = "max-quality"  # the name of the point written
# MILP weights of warm GiB and of GPUs used for that point: small against a quality penalty
# of 0.01 on a model with 0.5% of the requests (w_quality 10 x 0.01 x 0.005 = 5e-4), so
# memory and GPUs only break ties between equally good placements
ROOMY_W = 1e-5


def idle_gpu_point(
    ctx: SearchContext,
    ev: Evaluator,
    written: list[Evaluation],
    evals: list[Evaluation],
    baselines: list[PointMetrics],
) -> Evaluation | None:
    """Step 4b of `select`: the placement that uses the idle GPUs for quality and no
    sleepers, evaluated (and appended to `evals`), where every written point leaves a GPU
    idle; returned where it `offers_more` than they do and neither a written point nor one of
    the `baselines` (as the table shows them) `tie_beats` it, the variants' quality cost
    counted, else None."""
    if not written or any(e.chosen.gpus_used >= ctx.cluster.gpu_count for e in written):
        return None
    base = max(written, key=lambda e: (e.chosen.slo_attainment, -e.index)).knobs
    knobs = replace(base, may_sleep=frozenset(), w_memory=ROOMY_W, w_gpus=ROOMY_W)
    roomy = ev.evaluate(len(evals), knobs)
    evals.append(roomy)
    ev.evaluated(len(evals))
    if not roomy.feasible or not offers_more(roomy, written, ctx.slo.attainment):
        return None
    others = [*(o.chosen for o in written), *baselines]
    return None if any(tie_beats(m, roomy.chosen, quality_cost) for m in others) else roomy


def offers_more(e: Evaluation, written: list[Evaluation], target: float) -> bool:
    """`e` is worth writing beside `written`: it holds the SLO as well as the target or the
    weakest written point (on the days points are chosen on), and no written point gives at
    least its quality (quality cost no higher) and switching (switch P95 no higher)."""
    att = e.chosen.slo_attainment
    floor = min([target, *(o.chosen.slo_attainment for o in written)])
    if att < floor - 1e-9:
        return False
    q, sw = e.chosen.quality_cost, e.chosen.switch_p95_s
    return not any(
        o.chosen.quality_cost <= q + 1e-12 and o.chosen.switch_p95_s <= sw for o in written
    )
