"""Quality cost of a point: the quality penalty each request pays, per request.

A request its model's own instances answer pays the penalty of their variant (models.yaml
`quality_penalty`: AWQ against bf16, say); one a stand-in answers pays the stand-in's (the
simulator counts those: `SimResult.stand_ins`). `quality_cost` in the metrics is the sum
over all requests divided by their number, both parts together; `variant_quality_cost` the
variants' part alone (the search's objective weighs only the stand-ins' part, as
`OptimizeConfig.quality_weight` says).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from planner.optimizer.baseline_parts import Baseline
from planner.optimizer.point_metrics import PointMetrics
from planner.schemas.models import Models
from planner.schemas.plan import Point


def variant_penalties(point: Point, models: Models) -> dict[str, float]:
    """model -> the mean quality penalty of the variants its instances in `point` run (a
    model whose replicas run two variants: their mean, as requests spread over them)."""
    by_model: dict[str, list[float]] = {}
    for inst in point.instances:
        if inst.model not in models.names:
            continue
        v = models.model(inst.model).variant(inst.variant)
        by_model.setdefault(inst.model, []).append(v.quality_penalty)
    return {m: sum(p) / len(p) for m, p in by_model.items()}


def with_variant_quality(metrics: PointMetrics, point: Point, models: Models) -> PointMetrics:
    """`metrics` (a simulation's, with `per_model`) with the variants' quality penalties added
    to `quality_cost`, overall and per model, for the requests the model's own instances
    answered (served, not by a stand-in); `variant_quality_cost` is that part alone."""
    pen = variant_penalties(point, models)
    total = 0.0
    per = {}
    for name, pm in metrics.per_model.items():
        n = pm.requests
        own = max(0.0, n - pm.failed - n * pm.substituted_share)
        cost = own * pen.get(name, 0.0)
        total += cost
        variant = cost / n if n else 0.0
        per[name] = replace(
            pm, quality_cost=pm.quality_cost + variant, variant_quality_cost=variant
        )
    variant = total / metrics.requests if metrics.requests else 0.0
    return replace(
        metrics,
        quality_cost=metrics.quality_cost + variant,
        variant_quality_cost=variant,
        per_model=per,
    )


def baselines_quality(
    shown: Mapping[str, PointMetrics | str], built: Mapping[str, Baseline | str], models: Models
) -> dict[str, PointMetrics | str]:
    """Baselines' metrics (`scoring.baselines_on`; one that could not be built: why) with
    their variants' quality cost."""
    out: dict[str, PointMetrics | str] = {}
    for n, m in shown.items():
        b = built[n]
        if isinstance(m, str) or isinstance(b, str):
            out[n] = m
        else:
            out[n] = with_variant_quality(m, b.point, models)
    return out


def quality_cost(metrics: PointMetrics) -> float:
    """Both parts of `metrics`' quality cost."""
    return metrics.quality_cost


def stand_in_quality_cost(metrics: PointMetrics) -> float:
    """The stand-ins' part of `metrics`' quality cost."""
    return metrics.quality_cost - metrics.variant_quality_cost
