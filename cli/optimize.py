"""`planner optimize`: inputs -> Pareto set of plans (plan.yaml), with a report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import JsonOpt, ProfilesOpt, err_console, print_json
from planner.cli.optimize_show import print_summary, progress_bar, summary_json
from planner.errors import InputError
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.point_metrics import metrics_json

_D = OptimizeConfig()


def register(app: typer.Typer) -> None:
    """Add `optimize`."""
    app.command("optimize")(optimize_cmd)


def _opt(field: str, *flags: str, **kw: Any) -> Any:
    """A typer option whose help is the `OptimizeConfig` field's description."""
    return typer.Option(*flags, help=OptimizeConfig.model_fields[field].description, **kw)


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
    profiles: ProfilesOpt = None,
    evals: Annotated[int, _opt("evals", min=1, max=500)] = _D.evals,
    seed: Annotated[int, _opt("seed", min=0)] = _D.seed,
    time_limit: Annotated[float, _opt("milp_time_limit_s", "--time-limit")] = _D.milp_time_limit_s,
    milp_nodes: Annotated[
        int, _opt("milp_max_nodes", "--milp-nodes", min=1, max=10_000_000)
    ] = _D.milp_max_nodes,
    report: Annotated[
        Path | None,
        typer.Option("--report", help="draw the Pareto front and placement (.png or .html)"),
    ] = None,
    baselines: Annotated[bool, _opt("baselines", "--baselines/--no-baselines")] = _D.baselines,
    validate_days: Annotated[
        int | None, _opt("validate_days", "--validate-days", min=0, max=366)
    ] = _D.validate_days,
    held_back: Annotated[str, _opt("held_back", "--held-back")] = _D.held_back,
    quality_weight: Annotated[
        float | None, _opt("quality_weight", "--quality-weight", min=0, max=1e6)
    ] = _D.quality_weight,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            help="worker processes for batches of plan variants (default: usable CPUs, at most 4); "
            "the plan is the same for any number",
            min=1,
            max=64,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Search placements (MILP inside a Bayesian search), simulate each, write the Pareto set."""
    from planner.app.optimize import OptimizeHooks, OptimizeRequest, optimize

    _check_report_name(report)
    cfg = OptimizeConfig(
        evals=evals,
        seed=seed,
        milp_time_limit_s=time_limit,
        milp_max_nodes=milp_nodes,
        validate_days=validate_days,
        held_back=held_back,
        baselines=baselines,
        quality_weight=quality_weight,
    )
    req = OptimizeRequest(cluster, models, slo, workload, cfg, output, profiles, jobs)
    hooks = OptimizeHooks(warn=_warn, busy=lambda title: err_console.status(title))
    if not json_out:
        hooks = replace(hooks, searching=progress_bar)
    done = optimize(req, hooks)
    if report is not None:
        from planner.cli.report import draw_report

        draw_report(report, done.result, done.plan, metrics_json(done.result.baselines))
    if json_out:
        print_json(summary_json(done.result, done.plan, done.path))
    else:
        print_summary(done.result, done.plan, done.path, done.slo)


def _warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/] {message}", highlight=False)


def _check_report_name(report: Path | None) -> None:
    """A report is drawn as .png or .html: say so before the search, not after it."""
    if report is not None and report.suffix not in (".png", ".html"):
        raise InputError(
            "unsupported report format", file=str(report), fix="use a .png or .html file name"
        )
