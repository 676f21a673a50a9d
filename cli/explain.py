"""`planner explain PLAN`: why each model got its variant, GPUs and tier
(`planner.app.explain`)."""

from __future__ import annotations

import contextlib
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
    err_console,
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
    from planner.app.explain import explain
    from planner.optimizer.daymemory import hours_text, idle_sleep_rule

    spinner = err_console.status(f"reading the workload {workload.name} ...") if workload else None
    with spinner or contextlib.nullcontext():
        done = explain(plan_path, point, workload=workload, cluster=cluster, models=models)
    if json_out:
        print_json(done.to_json())
        return
    exps, pt = done.models, done.point
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
    for d in done.gpus:
        extra = f"; up to {d.on_demand_gib:.1f} GiB more" if d.on_demand_gib else ""
        console.print(
            f"  {d.node}:{d.gpu}: peak {d.peak_gib:.1f} GiB at "
            f"{hours_text(d.peak_hours)}{extra} when a request wakes a sleeper off-hours",
            highlight=False,
            markup=False,
        )
    console.print(f"  {idle_sleep_rule(pt)}", highlight=False, markup=False)
