"""What to tell a user whose inputs cannot be served: the binding SLO and the fixes that fit."""

from __future__ import annotations

from collections.abc import Sequence

from planner.errors import InfeasibleError
from planner.optimizer.candidates import Candidate, smallest_footprint
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.search_context import SearchContext
from planner.schemas.models import Models
from planner.schemas.slo import Slo


def binding_slo(metrics: PointMetrics, slo: Slo) -> str:
    """Which SLO the worst model misses by the most (relative), in words."""
    worst = ("none", 0.0)
    for model, pm in sorted(metrics.per_model.items()):
        t = slo.for_model(model)
        for key, value, target in (
            ("ttft_p95_s", pm.ttft_p95_s, t.ttft_p95_s),
            ("tpot_p95_s", pm.tpot_p95_s, t.tpot_p95_s),
            ("switch_p95_s", pm.switch_p95_s, t.switch_p95_s),
        ):
            if target and value > target:
                ratio = value / target
                if ratio > worst[1]:
                    worst = (f"{model} {key} {value:.2f} s > target {target:.2f} s", ratio)
    return (
        worst[0]
        if worst[1]
        else "attainment below target with every P95 within target (tail of the per-request distribution)"
    )


_FOUR_BIT = {"awq", "gptq", "int4", "mxfp4"}


def smaller_variant_steps(models: Models, names: list[str]) -> list[str]:
    """'add a smaller variant of M' for each of `names` that has one to gain (not at 4 bits)."""
    steps = []
    for m in names:
        have = {v.quantization for v in models.model(m).variants}
        if not have & _FOUR_BIT:
            smaller = "an int4 (awq/gptq) variant" if "fp8" in have else "an fp8 or int4 variant"
            steps.append(f"add {smaller} of {m} to models.yaml")
    return steps


def capacity_fix(models: Models) -> str:
    """What to change when no placement serves the demand (no flag sets the headroom)."""
    return "; or ".join(
        [
            "add GPUs to cluster.yaml",
            *smaller_variant_steps(models, models.names),
            "plan for less traffic (fewer users in the workload)",
        ]
    )


def unplaceable_fix(models: Models, missing: list[str]) -> str:
    """What to change so that the `missing` models fit: a smaller variant only where one could
    exist (a model already at 4 bits has none), then context length and GPUs."""
    steps = smaller_variant_steps(models, missing)
    steps += [
        "lower max_context of " + ", ".join(missing) + " in models.yaml",
        "add GPUs with more memory to cluster.yaml (or more on one node, for a larger TP)",
    ]
    return "; or ".join(steps)


def check_placeable(ctx: SearchContext, loosest: Sequence[Candidate]) -> None:
    """Raise InfeasibleError naming each model that fits nowhere, before any search;
    `loosest`: the candidates of the loosest knobs (`search_context.loosest_knobs`)."""
    have = {c.model for c in loosest}
    missing = [m for m in ctx.models.names if m not in have]
    if missing:
        lines = []
        for m in missing:
            lines.append(f"model {m!r} fits on no GPU of the cluster:")
            lines += ["    " + s for s in smallest_footprint(ctx.cluster, ctx.models, m, ctx.calib)]
        raise InfeasibleError("\n".join(lines), fix=unplaceable_fix(ctx.models, missing))


def explain_capacity(ctx: SearchContext, roomiest: Sequence[Candidate]) -> str:
    """Why no placement meets demand: models whose demand exceeds what the cluster can give;
    `roomiest`: the candidates of the roomiest knobs (`search_context.roomiest_knobs`)."""
    parts = []
    reps = ctx.cfg.max_replicas
    for m in ctx.models.names:
        d = ctx.demand.get(m)
        best = max((c.capacity_rps for c in roomiest if c.model == m), default=0.0)
        if d and best * reps < d.peak_rps:
            parts.append(
                f"{m}: peak {d.peak_rps:.2f} req/s > {reps} x {best:.2f} req/s per instance"
            )
    return "; ".join(parts) or "all models together need more GPU memory than the cluster has"
