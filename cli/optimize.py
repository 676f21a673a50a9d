"""`planner optimize`: inputs -> Pareto set of plans (plan.yaml), with a report."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from planner.cli.common import JsonOpt, ProfilesOpt, console, err_console, print_json
from planner.errors import InputError
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.point_metrics import metrics_json

if TYPE_CHECKING:
    from planner.optimizer.point_metrics import PointMetrics

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
    from planner.app.plans import OptimizeInputs
    from planner.cli import inputs as inp
    from planner.planfile import write_plan

    _check_report_name(report)
    cl, ms, sl, trace, calib = _load(cluster, models, slo, workload, profiles, seed)
    cfg = OptimizeConfig(
        evals=evals, seed=seed, milp_time_limit_s=time_limit, milp_max_nodes=milp_nodes,
        validate_days=validate_days, held_back=held_back, baselines=baselines,
        quality_weight=quality_weight,
    )  # fmt: skip
    inp.silence_solver_banner()
    out = output or Path("plans") / f"{cl.name}.plan.yaml"
    paths = dict(cluster=cluster, models=models, slo=slo, workload=workload, profiles=profiles)
    src = OptimizeInputs(cl, ms, sl, trace, calib or {}, paths)
    plan, result = _search(src, cfg, out, jobs, show_progress=not json_out)
    write_plan(out, plan, cl)

    if report is not None:
        from planner.cli.report import draw_report

        draw_report(report, result, plan, metrics_json(result.baselines))
    if json_out:
        print_json(_summary_json(result, plan, out))
    else:
        _print_summary(result, plan, out, sl)


def _check_report_name(report: Path | None) -> None:
    """A report is drawn as .png or .html: say so before the search, not after it."""
    if report is not None and report.suffix not in (".png", ".html"):
        raise InputError(
            "unsupported report format", file=str(report), fix="use a .png or .html file name"
        )


def _load(
    cluster: Path, models: Path, slo: Path, workload: Path, profiles: Path | None, seed: int
) -> tuple[Any, Any, Any, Any, Any]:
    """The inputs, checked: cluster, models (pins against the cluster), SLO, trace and the
    calibration of `profiles`."""
    from planner.cli import inputs as inp
    from planner.schemas import check_pins

    cl = inp.cluster(cluster)
    ms = inp.models(models)
    check_pins(ms, cl, file=str(models))
    sl = inp.slo(slo, ms)
    return cl, ms, sl, inp.workload(workload, ms, seed), inp.calibration(profiles)


def _search(
    src: Any, cfg: OptimizeConfig, out: Path, jobs: int | None, *, show_progress: bool
) -> tuple[Any, Any]:
    """(plan, result) of the optimize pipeline (`app.plans.optimize_plan`) on the loaded
    inputs, with a progress bar (and lines, off a terminal)."""
    from planner.app.plans import optimize_plan
    from planner.forkmap import default_workers, fork_map

    job_map = fork_map(jobs or default_workers())
    if not show_progress:
        return optimize_plan(src, cfg, out=out, clock=time.perf_counter, job_map=job_map)
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
        task = bar.add_task("", total=cfg.evals)
        lines = _ProgressLines(not console.is_terminal)

        def progress(done: int, total: int, best: PointMetrics | None) -> None:
            desc = (
                f"best: switch P95 {best.switch_p95_s:.2f} s, warm {best.warm_gpu_gib:.0f} GiB, "
                f"attainment {best.slo_attainment:.1%}"
                if best
                else lines.desc
            )
            bar.update(task, completed=done, total=total, description=desc)
            lines.update(done, total, desc)

        return optimize_plan(
            src, cfg, out=out, progress=progress, clock=time.perf_counter, job_map=job_map
        )


def _summary_json(result: Any, plan: Any, out: Path) -> dict[str, Any]:
    """The `--json` summary of a run: where the plan went, its points, twins, baselines and
    the search's figures."""
    return {
        "plan": str(out),
        "selected": plan.selected,
        "points": metrics_json(result.metrics),
        "points_fit": metrics_json(result.metrics_fit),
        "twins": {f"lru@{n}": m for n, m in metrics_json(result.twins).items()},
        "baselines": metrics_json(result.baselines),
        "notes": plan.notes,
        "capacity": result.capacity.to_json() if result.capacity else None,
        "hops": {a: {b: h.model_dump() for b, h in d.items()} for a, d in plan.hops.items()},
        "validate_days": result.validate_days,
        "held_days": [{"day": d, "requests": n} for d, n in result.held_days],
        "held_back": plan.search.get("held_back"),  # the rule that chose them
        "evaluations": len(result.evaluations),
        "feasible_evaluations": sum(e.feasible for e in result.evaluations),
        "milp_time_s": round(result.milp_time_s, 3),
        "milp_max_s": round(result.milp_max_s, 3),
        "sim_time_s": round(result.sim_time_s, 3),
    }


def _print_summary(result: Any, plan: Any, out: Path, sl: Any) -> None:
    """The run's table (points beside their twins and the baselines), capacity shortfall,
    notes and where the plan went."""
    from planner.cli.tables import metrics_table

    which = ", ".join(f"day {d} ({n} requests)" for d, n in result.held_days)
    days = (
        f"the {result.validate_days} held-back days: {which}; fitted on {result.fit_requests} "
        "requests"
        if result.validate_days
        else "the whole trace (nothing held back)"
    )
    console.print(
        metrics_table(
            f"Pareto points, each beside its lru@ twin, and baselines: simulated on {days}",
            metrics_json(result.metrics),
            metrics_json(result.baselines),
            selected=plan.selected,
            attainment=sl.attainment,
            twins=metrics_json(result.twins),
            fitted=metrics_json(result.metrics_fit) if result.validate_days else None,
        )
    )
    if result.capacity is not None and result.capacity.overloaded:
        from planner.cli.evaluate_show import capacity_table

        console.print(capacity_table(result.capacity, "demand beyond what the cluster can serve"))
    for n in result.notes:
        console.print(f"[yellow]note:[/] {n}")
    console.print(
        f"wrote [bold]{out}[/] ({len(plan.points)} points, selected [bold]{plan.selected}[/]; "
        f"{len(result.evaluations)} evaluations, MILP {result.milp_time_s:.1f} s, "
        f"simulator {result.sim_time_s:.1f} s)"
    )


class _ProgressLines:
    """Progress as plain lines on stderr when stdout is not a terminal (a pipe, a log file),
    where the bar shows nothing: the first evaluation, then at most one line every
    `every_s`, and the last one."""

    def __init__(self, on: bool, every_s: float = 10.0):
        self.on, self.every_s = on, every_s
        self.t0 = time.perf_counter()
        self.last_s = -float("inf")
        self.desc = ""

    def update(self, done: int, total: int, desc: str) -> None:
        self.desc = desc
        now = time.perf_counter()
        if not self.on or (now - self.last_s < self.every_s and done not in (1, total)):
            return
        self.last_s = now
        tail = f", {desc}" if desc else ""
        err_console.print(
            f"optimize: {done}/{total} evaluated, {now - self.t0:.0f} s{tail}",
            highlight=False, markup=False, soft_wrap=True,
        )  # fmt: skip
