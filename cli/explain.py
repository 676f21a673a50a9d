"""`planner explain PLAN`: why each model got its variant, GPUs and tier."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import (
    JsonOpt,
    PlanArg,
    PlanClusterOpt,
    PlanModelsOpt,
    PointOpt,
    console,
    print_json,
)


def register(app: typer.Typer) -> None:
    """Add `explain`."""
    app.command("explain")(explain_cmd)


def explain_cmd(
    plan_path: PlanArg,
    point: PointOpt = None,
    workload: Annotated[
        Path | None,
        typer.Option("--workload", help="trace to take demand from; default: the plan's summary"),
    ] = None,
    cluster: PlanClusterOpt = None,
    models: PlanModelsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """For each model of a point as the file places it: what binds, what its tier costs, what else would fit."""
    from dataclasses import asdict

    from planner.app.inputs import resolve
    from planner.cli import inputs as inp
    from planner.optimizer.demand import model_demand
    from planner.optimizer.explain import demand_from_summary, explain

    r = resolve(plan_path, cluster=cluster, models=models, point=point)
    plan, cl, ms, sl = r.plan, r.cluster, r.models, r.slo
    pt = plan.point(point)
    if workload is not None:
        demand = model_demand(inp.workload(workload, ms, int(plan.search.get("seed", 0))))
    else:
        demand = demand_from_summary(plan.workload_summary)
    knobs = plan.search.get("knobs", {}).get(pt.name) or {}
    exps = explain(pt, cl, ms, sl, demand, headroom=float(knobs.get("headroom", 1.0)))
    from planner.optimizer.daymemory import day_memory, hours_text, idle_sleep_rule

    days = [
        {"node": d.node, "gpu": d.gpu, "peak_gib": d.peak_gib, "peak_hours": d.peak_hours,
         "on_demand_gib": d.on_demand_gib}
        for d in day_memory(pt)
    ]  # fmt: skip
    if json_out:
        print_json(
            {"point": pt.name, "models": [asdict(e) for e in exps], "gpus": days,
             "idle_sleep": idle_sleep_rule(pt)}
        )  # fmt: skip
        return
    for e in exps:
        console.print(f"[bold]{e.model}[/]", highlight=False)
        for p in e.placements:
            console.print(f"  runs as {p}", highlight=False, markup=False)
        for r in e.reasons:
            console.print(f"  - {r}", highlight=False, markup=False)
        for r in e.stand_ins:
            console.print(f"  - {r}", highlight=False, markup=False)
        console.print(
            f"  alternatives: {e.alternative}", style="dim", highlight=False, markup=False
        )
    console.print("[bold]memory over the day[/] (per GPU, planned awake, UTC)", highlight=False)
    for d in days:
        extra = f"; up to {d['on_demand_gib']:.1f} GiB more" if d["on_demand_gib"] else ""
        console.print(
            f"  {d['node']}:{d['gpu']}: peak {d['peak_gib']:.1f} GiB at "
            f"{hours_text(d['peak_hours'])}{extra} when a request wakes a sleeper off-hours",
            highlight=False, markup=False,
        )  # fmt: skip
    console.print(f"  {idle_sleep_rule(pt)}", highlight=False, markup=False)
