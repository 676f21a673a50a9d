"""Quality cost of a point: the quality penalty each request pays, per request.

A request its model's own instances answer pays the penalty of their variant (models.yaml
`quality_penalty`: AWQ against bf16, say); one a stand-in answers pays the stand-in's (the
simulator counts those: `SimResult.stand_ins`). `quality_cost` in the metrics is the sum
over all requests divided by their number, both parts together; `variant_quality_cost` the
variants' part alone (the search's objective weighs only the stand-ins' part, as
`OptimizeConfig.quality_weight` says).
"""

from __future__ import annotations

from typing import Any

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


def with_variant_quality(metrics: dict[str, Any], point: Point, models: Models) -> dict[str, Any]:
    """`metrics` (a simulation's, with `per_model`) with the variants' quality penalties added
    to `quality_cost`, overall and per model, for the requests the model's own instances
    answered (served, not by a stand-in); `variant_quality_cost` is that part alone."""
    pen = variant_penalties(point, models)
    per = metrics.get("per_model", {})
    total = 0.0
    new_per = {}
    for name, pm in per.items():
        n = pm.get("requests", 0)
        own = max(0.0, n - pm.get("failed", 0) - n * pm.get("substituted_share", 0.0))
        cost = own * pen.get(name, 0.0)
        total += cost
        new_per[name] = {
            **pm,
            "quality_cost": pm.get("quality_cost", 0.0) + (cost / n if n else 0.0),
            "variant_quality_cost": cost / n if n else 0.0,
        }
    n_all = metrics.get("requests", 0)
    variant = total / n_all if n_all else 0.0
    return {
        **metrics,
        "quality_cost": metrics.get("quality_cost", 0.0) + variant,
        "variant_quality_cost": variant,
        **({"per_model": new_per} if per else {}),
    }


def baselines_quality(
    shown: dict[str, dict[str, Any]], built: dict[str, Any], models: Models
) -> dict[str, dict[str, Any]]:
    """Baselines' metrics (`scoring.baselines_on`) with their variants' quality cost."""
    return {
        n: m if "error" in m else with_variant_quality(m, built[n].point, models)
        for n, m in shown.items()
    }


def quality_cost(metrics: dict[str, Any]) -> float:
    """Both parts of `metrics`' quality cost (0 where it has none)."""
    return metrics.get("quality_cost", 0.0)


def stand_in_quality_cost(metrics: dict[str, Any]) -> float:
    """The stand-ins' part of `metrics`' quality cost."""
    return metrics.get("quality_cost", 0.0) - metrics.get("variant_quality_cost", 0.0)
