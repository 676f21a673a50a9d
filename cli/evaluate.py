"""`planner evaluate`: replay a trace against plan points (and baselines) in the simulator."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import (
    JsonOpt,
    PlanClusterOpt,
    PlanModelsOpt,
    PlanSloOpt,
    PointOpt,
    ProfilesOpt,
    console,
    print_json,
)
from planner.errors import InputError

BASELINE_NAMES = ("static", "lru", "melange", "lru-matched")


def evaluate_points(
    plan_path: Path | None,
    workload: Path,
    *,
    point: str | None = None,
    all_points: bool = False,
    baseline: str | None = None,
    cluster_path: Path | None = None,
    models_path: Path | None = None,
    slo_path: Path | None = None,
    profiles: Path | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(name -> SimResult, point name -> CapacityReport) for the chosen plan points and
    baseline; `lru-matched` runs each point's `lru@` twin right after it."""
    from planner.optimizer import scoring
    from planner.optimizer.capacity import (
        capacity_report,
        point_capacity_rps,
        slow_within_capacity,
    )
    from planner.optimizer.config import OptimizeConfig
    from planner.optimizer.demand import model_demand
    from planner.optimizer.sim.request import to_requests
    from planner.optimizer.sim.simulator import simulate
    from planner.trace.frame import read_trace

    _check_choice(plan_path, baseline)
    plan, cluster, models, slo, calib = _inputs(
        plan_path, cluster_path, models_path, slo_path, profiles
    )
    trace = read_trace(workload, models.names)
    todo = _todo(plan, plan_path, point, all_points, baseline, cluster, models, slo, calib, trace)
    req = to_requests(trace, models.names)
    demand = model_demand(trace) if plan is not None else {}  # for the points' capacity
    cfg = OptimizeConfig()
    results: dict[str, Any] = {}
    capacity: dict[str, Any] = {}
    for name, p, perfs, kw in todo:
        results[name] = r = simulate(p, perfs, req, slo, model_names=models.names, **kw)
        if kw:  # a baseline: no capacity table, no twin
            continue
        capacity[name] = c = capacity_report(
            trace, point_capacity_rps(p, perfs, demand, slo), whole_cluster=False
        )
        per = r.to_metrics()["per_model"]
        ttft = {m: v["ttft_p95_s"] for m, v in per.items()}
        c.slow = slow_within_capacity(
            trace, c, ttft, {m: v["switch_p95_s"] for m, v in per.items()}, slo
        )
        if baseline == "lru-matched":
            results[f"lru@{name}"] = scoring.twin_result(
                p,
                perfs,
                r.warm_gpu_gib,
                cluster,
                slo,
                req,
                models.names,
                gpu_margin=cfg.gpu_memory_margin,
                host_margin=cfg.host_memory_margin,
            )
    return results, capacity


def _check_choice(plan_path: Path | None, baseline: str | None) -> None:
    """A plan, a known baseline, or both; `lru-matched` only with a plan."""
    if baseline == "lru-matched" and plan_path is None:
        raise InputError(
            "the lru-matched baseline is one twin per plan point: give a PLAN",
            path="--baseline",
            fix="planner evaluate plan.yaml --workload trace.csv --baseline lru-matched",
        )
    if plan_path is None and baseline is None:
        raise InputError(
            "give a PLAN, or --baseline with --cluster/--models/--slo",
            path="PLAN",
            fix="planner evaluate plan.yaml --workload trace.csv",
        )
    if baseline is not None and baseline not in BASELINE_NAMES:
        raise InputError(
            f"unknown baseline {baseline!r}",
            path="--baseline",
            fix=f"use one of {list(BASELINE_NAMES)}",
        )


def _inputs(
    plan_path: Path | None,
    cluster_path: Path | None,
    models_path: Path | None,
    slo_path: Path | None,
    profiles: Path | None,
) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """(plan or None, cluster, models, SLO, calibration): the plan's recorded inputs (the
    one resolver, checked; a flag overrides one), else the flags' files."""
    from planner.app.inputs import resolve
    from planner.cli.common import err_console
    from planner.cli.inputs import calibration, input_path
    from planner.schemas import load_cluster, load_models, load_slo

    if plan_path is not None:
        r = resolve(
            plan_path, cluster=cluster_path, models=models_path, slo=slo_path,
            profiles=profiles, need_slo=True,
        )  # fmt: skip
        for w in r.warnings:
            err_console.print(f"[yellow]warning:[/] {w}", highlight=False)
        return r.plan, r.cluster, r.models, r.slo, r.calib
    cluster = load_cluster(input_path(cluster_path, None, None, "cluster"))
    models = load_models(input_path(models_path, None, None, "models"))
    slo = load_slo(input_path(slo_path, None, None, "slo"))
    return None, cluster, models, slo, calibration(profiles) or {}


def _todo(
    plan: Any,
    plan_path: Path | None,
    point: str | None,
    all_points: bool,
    baseline: str | None,
    cluster: Any,
    models: Any,
    slo: Any,
    calib: dict[str, Any],
    trace: Any,
) -> list[tuple[str, Any, dict[str, Any], dict[str, Any]]]:
    """What to simulate: (name, point, perfs, `simulate` keywords; none for a plan point)."""
    from planner.cli.inputs import quiet_c_stdout
    from planner.optimizer import baselines
    from planner.optimizer.sim.perfs import perfs_for_point

    todo: list[tuple[str, Any, dict[str, Any], dict[str, Any]]] = []
    if plan is not None:
        if all_points:
            pts = plan.points
        else:
            try:
                pts = [plan.point(point)]
            except KeyError:
                raise InputError(
                    f"no point named {point!r}",
                    file=str(plan_path),
                    path="--point",
                    fix=f"use one of {[p.name for p in plan.points]}",
                ) from None
        for p in pts:
            todo.append((p.name, p, perfs_for_point(p, cluster, models, calib), {}))
    if baseline is not None and baseline != "lru-matched":
        with quiet_c_stdout():
            b = baselines.build(baseline, cluster, models, slo, trace)
        perfs = perfs_for_point(b.point, cluster, models, calib) if calib else b.perfs
        name = baseline if baseline not in {t[0] for t in todo} else f"baseline-{baseline}"
        todo.append((name, b.point, perfs, b.simulate_kwargs()))
    return todo


def capacity_table(report: Any, title: str):
    """The capacity table: per model, peak hourly demand against capacity, hours beyond."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in (
        "model",
        "peak req/h",
        "prefill tok/s",
        "decode tok/s",
        "capacity req/h",
        "hours over",
    ):
        t.add_column(col, justify="left" if col == "model" else "right")
    for r in report.rows:
        t.add_row(
            r.model,
            f"{r.peak_requests_per_h:.0f}",
            f"{r.peak_prefill_tokens_per_s:.0f}",
            f"{r.peak_decode_tokens_per_s:.0f}",
            f"{r.capacity_requests_per_h:.0f}",
            str(len(r.hours_over)) if r.hours_over else "",
            style="red" if r.hours_over else None,
        )
    if report.hours_over_all:
        t.caption = report.lines()[-1]
    return t


def _fmt(x: float) -> str:
    from planner.cli.tables import fmt_num

    return fmt_num(x)


def _table(results: dict[str, Any]) -> None:
    from rich import box
    from rich.table import Table

    from planner.cli.tables import EVALUATE_SCORING, refusal_text

    first = next(iter(results.values()))
    refused = [f"{n}: {t}" for n, r in results.items() if (t := refusal_text(r.refused()))]
    t = Table(
        title="simulated on the workload (P95 latencies, s)",
        caption="\n".join([f"{first.requests} requests", *refused, EVALUATE_SCORING]),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("point", "SLO met", "TTFT", "TPOT", "switch", "wakes", "warm GiB", "GPUs", "busy"):
        t.add_column(col, justify="left" if col == "point" else "right")
    for name, r in results.items():
        m = r.to_metrics()
        t.add_row(
            name,
            f"{m['slo_attainment']:.1%}",
            _fmt(m["ttft_p95_s"]),
            _fmt(m["tpot_p95_s"]),
            _fmt(m["switch_p95_s"]),
            str(m["switch_count"]),
            f"{m['warm_gpu_gib']:.1f}",
            str(m["gpus_used"]),
            f"{r.gpu_busy_fraction:.1%}",
        )
    console.print(t)
    for name, r in results.items():
        pm = Table(
            title=f"{name}: per model (P95 latencies, s)",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
        )
        for col in ("model", "requests", "failed", "SLO met", "TTFT", "TPOT", "switch", "wakes"):
            pm.add_column(col, justify="left" if col == "model" else "right")
        per_model = r.to_metrics()["per_model"]
        why = [f"{m}: {t}" for m, v in per_model.items() if (t := refusal_text(v["refused"]))]
        pm.caption = "\n".join(why) or None
        for model, v in per_model.items():
            pm.add_row(
                model,
                str(v["requests"]),
                str(v["failed"]),
                f"{v['slo_attainment']:.1%}",
                _fmt(v["ttft_p95_s"]),
                _fmt(v["tpot_p95_s"]),
                _fmt(v["switch_p95_s"]),
                str(v["switch_count"]),
            )
        console.print(pm)


def plot(results: dict[str, Any], out: Path) -> None:
    """Hourly P95 TTFT and warm GPU memory over time, one line per point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for name, r in results.items():
        hours = (r.arrival_s - r.start_s) / 3600.0
        if len(hours):
            b = np.floor(hours).astype(int)
            xs, ys = [], []
            for h in np.unique(b):
                v = r.ttft_s[b == h]
                v = v[np.isfinite(v)]
                if len(v):
                    xs.append(h + 0.5)
                    ys.append(np.percentile(v, 95))
            ax1.plot(xs, ys, label=name, lw=1)
        ts, gib = r.memory_curve
        ax2.step((ts - r.start_s) / 3600.0, gib, where="post", label=name, lw=1)
    ax1.set_ylabel("TTFT P95 per hour, s")
    ax1.set_yscale("symlog", linthresh=1.0)
    ax1.legend(loc="upper right", fontsize=8)
    ax2.set_ylabel("warm GPU memory, GiB")
    ax2.set_xlabel("hours from the start of the trace")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


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
    if point is not None and all_points:
        raise InputError(
            "--point and --all-points exclude each other",
            path="--point",
            fix="give one of them",
        )
    busy = contextlib.nullcontext() if json_out else console.status("simulating...")
    with busy:
        results, capacity = evaluate_points(
            plan,
            workload,
            point=point,
            all_points=all_points,
            baseline=baseline,
            cluster_path=cluster,
            models_path=models,
            slo_path=slo,
            profiles=profiles,
        )
    if plot_out is not None:
        plot(results, plot_out)
    if json_out:
        print_json(
            {
                "points": {n: r.to_metrics() for n, r in results.items()},
                "capacity": {n: c.to_json() for n, c in capacity.items()},
            }
        )
        return
    _print_results(results, capacity, plot_out)


def _print_results(
    results: dict[str, Any], capacity: dict[str, Any], plot_out: Path | None
) -> None:
    """The metrics table, the points' capacity shortfalls and where the plot went."""
    _table(results)
    for name, c in capacity.items():
        if c.overloaded:
            console.print(capacity_table(c, f"{name}: demand beyond what the point can serve"))
        for model, why in c.slow.items():
            console.print(f"[yellow]note:[/] {name}: {model}: {why}", highlight=False)
    if plot_out is not None:
        console.print(f"plot: {plot_out}")
