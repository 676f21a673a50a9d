"""The `evaluate` service: replay a trace against plan points (and a baseline) in the
simulator: each point's metrics and capacity against the trace's demand, a baseline's
metrics, and with `lru-matched` each point's `lru@` twin right after it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from planner.optimizer.capacity import CapacityReport
    from planner.optimizer.perf.calib import Calib
    from planner.optimizer.sim.metrics import SimResult
    from planner.schemas.cluster import Cluster
    from planner.schemas.models import Models
    from planner.schemas.plan import Plan, Point
    from planner.schemas.slo import Slo

BASELINE_NAMES = ("static", "lru", "melange", "lru-matched")


@dataclass(frozen=True)
class EvaluateRequest:
    """What `planner evaluate` was asked: a plan (its recorded inputs, a flag overriding
    one) or a baseline on the flags' files, replayed on `workload`."""

    plan_path: Path | None
    workload: Path
    point: str | None = None
    all_points: bool = False
    baseline: str | None = None  # one of BASELINE_NAMES
    cluster: Path | None = None
    models: Path | None = None
    slo: Path | None = None
    profiles: Path | None = None


@dataclass(frozen=True)
class Evaluation:
    """The simulated results by name (plan points, then the baseline or each point's `lru@`
    twin) and each plan point's capacity against the trace's demand."""

    results: dict[str, SimResult] = field(default_factory=dict)
    capacity: dict[str, CapacityReport] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "points": {n: r.to_metrics() for n, r in self.results.items()},
            "capacity": {n: c.to_json() for n, c in self.capacity.items()},
        }


def evaluate(req: EvaluateRequest, warn: Callable[[str], None] = lambda _: None) -> Evaluation:
    """Simulate what `req` names (`warn` hears the inputs' warnings)."""
    if req.point is not None and req.all_points:
        raise InputError(
            "--point and --all-points exclude each other",
            path="--point",
            fix="give one of them",
        )
    results, capacity = evaluate_points(
        req.plan_path,
        req.workload,
        point=req.point,
        all_points=req.all_points,
        baseline=req.baseline,
        cluster_path=req.cluster,
        models_path=req.models,
        slo_path=req.slo,
        profiles=req.profiles,
        warn=warn,
    )
    return Evaluation(results, capacity)


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
    warn: Callable[[str], None] = lambda _: None,
) -> tuple[dict[str, SimResult], dict[str, CapacityReport]]:
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
        plan_path, cluster_path, models_path, slo_path, profiles, warn
    )
    trace = read_trace(workload, models.names)
    todo = _todo(plan, plan_path, point, all_points, baseline, cluster, models, slo, calib, trace)
    req = to_requests(trace, models.names)
    demand = model_demand(trace) if plan is not None else {}  # for the points' capacity
    cfg = OptimizeConfig()
    results: dict[str, SimResult] = {}
    capacity: dict[str, CapacityReport] = {}
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
    warn: Callable[[str], None],
) -> tuple[Plan | None, Cluster, Models, Slo, dict[str, Calib]]:
    """(plan or None, cluster, models, SLO, calibration): the plan's recorded inputs (the
    one resolver, checked; a flag overrides one), else the flags' files."""
    from planner.app.files import input_path
    from planner.app.inputs import calibration, resolve
    from planner.schemas import load_cluster, load_models, load_slo

    if plan_path is not None:
        r = resolve(
            plan_path,
            cluster=cluster_path,
            models=models_path,
            slo=slo_path,
            profiles=profiles,
            need_slo=True,
        )
        for w in r.warnings:
            warn(w)
        return r.plan, r.cluster, r.models, r.needed_slo(), r.calib
    cluster = load_cluster(input_path(cluster_path, None, None, "cluster"))
    models = load_models(input_path(models_path, None, None, "models"))
    slo = load_slo(input_path(slo_path, None, None, "slo"))
    calib, warnings = calibration(profiles)
    for w in warnings:
        warn(w)
    return None, cluster, models, slo, calib


_Todo = tuple[str, "Point", dict[str, Any], dict[str, Any]]


def _todo(
    plan: Plan | None,
    plan_path: Path | None,
    point: str | None,
    all_points: bool,
    baseline: str | None,
    cluster: Cluster,
    models: Models,
    slo: Slo,
    calib: dict[str, Calib],
    trace: pd.DataFrame,
) -> list[_Todo]:
    """What to simulate: (name, point, perfs, `simulate` keywords; none for a plan point)."""
    from planner.app.files import quiet_c_stdout
    from planner.optimizer import baselines
    from planner.optimizer.sim.perfs import perfs_for_point

    todo: list[_Todo] = []
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
