"""`planner optimize`: inputs -> Pareto set of plans (plan.yaml), with a report."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import JsonOpt, console, print_json
from planner.errors import InputError
from planner.optimizer.config import OptimizeConfig

_D = OptimizeConfig()


def register(app: typer.Typer) -> None:
    """Add `optimize`."""
    app.command("optimize")(optimize_cmd)


def optimize_cmd(
    cluster: Annotated[Path, typer.Option("--cluster", "-c", help="cluster.yaml")],
    models: Annotated[Path, typer.Option("--models", "-m", help="models.yaml")],
    workload: Annotated[
        Path,
        typer.Option("--workload", "-w", help="trace (csv/jsonl/parquet) or a synth spec (.yaml)"),
    ],
    slo: Annotated[Path, typer.Option("--slo", "-s", help="slo.yaml")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="plan file; default plans/<cluster>.plan.yaml"),
    ] = None,
    profiles: Annotated[
        Path | None, typer.Option("--profiles", help="folder of profiles (calibration)")
    ] = None,
    evals: Annotated[
        int, typer.Option(help=OptimizeConfig.model_fields["evals"].description, min=1, max=500)
    ] = _D.evals,
    seed: Annotated[
        int, typer.Option(help=OptimizeConfig.model_fields["seed"].description, min=0)
    ] = _D.seed,
    time_limit: Annotated[
        float,
        typer.Option(
            "--time-limit", help=OptimizeConfig.model_fields["milp_time_limit_s"].description
        ),
    ] = _D.milp_time_limit_s,
    report: Annotated[
        Path | None,
        typer.Option("--report", help="draw the Pareto front and placement (.png or .html)"),
    ] = None,
    baselines: Annotated[
        bool,
        typer.Option(
            "--baselines/--no-baselines", help="score static/lru/melange beside the points"
        ),
    ] = True,
    json_out: JsonOpt = False,
) -> None:
    """Search placements (MILP inside a Bayesian search), simulate each, write the Pareto set."""
    from planner.cli import inputs as inp
    from planner.io import atomic_write_text, dump_yaml
    from planner.optimizer.search import knobs_to_dict, optimize
    from planner.optimizer.workload.characterize import summarize

    if report is not None and report.suffix not in (".png", ".html"):
        raise InputError(
            "unsupported report format", file=str(report), fix="use a .png or .html file name"
        )
    cl = inp.cluster(cluster)
    ms = inp.models(models)
    sl = inp.slo(slo)
    trace = inp.workload(workload, ms, seed)
    calib = inp.calibration(profiles)
    cfg = OptimizeConfig(evals=evals, seed=seed, milp_time_limit_s=time_limit)
    scorer = inp.scorer(trace, sl)
    inp.silence_solver_banner()

    if json_out:
        result = optimize(cl, ms, sl, trace, cfg, scorer, calib, clock=time.perf_counter)
    else:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("[bold]optimize"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task("", total=evals)

            def progress(done: int, total: int, best: dict[str, Any] | None) -> None:
                desc = (
                    f"best: switch P95 {best['switch_p95_s']:.2f} s, warm {best['warm_gpu_gib']:.0f} GiB, "
                    f"attainment {best['slo_attainment']:.3f}"
                    if best
                    else ""
                )
                bar.update(task, completed=done, total=total, description=desc)

            result = optimize(cl, ms, sl, trace, cfg, scorer, calib, progress, time.perf_counter)

    from planner.schemas.plan import Plan

    out = output or Path("plans") / f"{cl.name}.plan.yaml"
    plan = Plan(
        inputs=inp.provenance(  # relative to the plan: `apply` finds them from any folder
            base=out.parent,
            cluster=cluster,
            models=models,
            slo=slo,
            workload=workload,
            profiles=profiles,
        ),
        workload_summary=summarize(trace),
        search={
            "seed": seed,
            "evals": evals,
            "solver": cfg.solver,
            "feasible_evals": sum(e.feasible for e in result.evaluations),
            "max_tp": cfg.max_tp,
            "max_replicas": cfg.max_replicas,
            "knobs": {n: knobs_to_dict(k) for n, k in result.knobs.items()},
        },
        selected=result.selected,
        points=result.points,
    )
    atomic_write_text(out, dump_yaml(plan.model_dump(mode="json", exclude_defaults=False)))

    base_metrics: dict[str, dict[str, Any]] = {}
    if baselines:
        base_metrics = inp.baseline_metrics(cl, ms, sl, trace, calib)
    points = result.metrics
    if report is not None:
        from planner.cli.report import draw_report

        draw_report(report, result, plan, base_metrics)
    if json_out:
        print_json(
            {
                "plan": str(out),
                "selected": plan.selected,
                "points": points,
                "baselines": base_metrics,
                "notes": result.notes,
                "evaluations": len(result.evaluations),
                "feasible_evaluations": sum(e.feasible for e in result.evaluations),
                "milp_time_s": round(result.milp_time_s, 3),
                "milp_max_s": round(result.milp_max_s, 3),
                "sim_time_s": round(result.sim_time_s, 3),
            }
        )
        return
    from planner.cli.tables import metrics_table

    console.print(
        metrics_table(
            "Pareto points (and baselines, same simulator)",
            points,
            base_metrics,
            selected=plan.selected,
            attainment=sl.attainment,
        )
    )
    for n in result.notes:
        console.print(f"[yellow]note:[/] {n}")
    console.print(
        f"wrote [bold]{out}[/] ({len(plan.points)} points, selected [bold]{plan.selected}[/]; "
        f"{len(result.evaluations)} evaluations, MILP {result.milp_time_s:.1f} s, "
        f"simulator {result.sim_time_s:.1f} s)"
    )
