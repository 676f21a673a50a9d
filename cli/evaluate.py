"""`planner evaluate`: replay a trace against plan points (and baselines) in the simulator
(`planner.app.evaluate`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import (
    JsonOpt,
    PlanClusterOpt,
    PlanModelsOpt,
    PlanSloOpt,
    PointOpt,
    ProfilesOpt,
    console,
    err_console,
    print_json,
)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("evaluate")(evaluate)


def evaluate(
    plan: Annotated[
        Path | None,
        typer.Argument(metavar="PLAN", help="plan.yaml to evaluate (optional with --baseline)."),
    ] = None,
    workload: Annotated[
        Path, typer.Option("--workload", help="Trace file (CSV, JSONL, Parquet, SQLite).")
    ] = ...,  # type: ignore[assignment]
    point: PointOpt = None,
    all_points: Annotated[
        bool, typer.Option("--all-points", help="Evaluate every point of the plan.")
    ] = False,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            help="Also evaluate a baseline: static, lru, melange, or lru-matched "
            "(each point's lru@ twin: reactive LRU on its instances within its warm GiB).",
        ),
    ] = None,
    cluster: PlanClusterOpt = None,
    models: PlanModelsOpt = None,
    slo: PlanSloOpt = None,
    profiles: ProfilesOpt = None,
    json_out: JsonOpt = False,
    plot_out: Annotated[
        Path | None,
        typer.Option("--plot", help="Write a PNG of latency and warm memory over time."),
    ] = None,
) -> None:
    """Replay a trace against plan points (and a baseline) in the simulator."""
    from planner.app.evaluate import EvaluateRequest
    from planner.app.evaluate import evaluate as service
    from planner.cli.evaluate_show import plot, print_results

    req = EvaluateRequest(
        plan_path=plan,
        workload=workload,
        point=point,
        all_points=all_points,
        baseline=baseline,
        cluster=cluster,
        models=models,
        slo=slo,
        profiles=profiles,
    )
    busy = contextlib.nullcontext() if json_out else console.status("simulating...")
    with busy:
        ev = service(req, warn=_warn)
    if plot_out is not None:
        plot(ev.results, plot_out)
    if json_out:
        print_json(ev.to_json())
        return
    print_results(ev, plot_out)


def _warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/] {message}", highlight=False)
