"""The `optimize` service: load and check the inputs (cluster, models with their pins, SLO,
the workload, a profile's calibration), run the one optimize pipeline
(`plans.optimize_plan`) and write the plan file."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.optimizer.config import OptimizeConfig
    from planner.optimizer.evaluation import SearchResult
    from planner.optimizer.point_metrics import PointMetrics
    from planner.schemas.plan import Plan
    from planner.schemas.slo import Slo

Progress = Callable[[int, int, "PointMetrics | None"], None]  # (done, total, best so far)


@dataclass(frozen=True)
class OptimizeRequest:
    """What `planner optimize` was asked: the input files, the search's config and where the
    plan goes (default plans/<cluster>.plan.yaml); `jobs` worker processes (default: usable
    CPUs, at most 4)."""

    cluster: Path
    models: Path
    slo: Path
    workload: Path  # a trace, or a synth spec (.yaml)
    config: OptimizeConfig
    output: Path | None = None
    profiles: Path | None = None
    jobs: int | None = None


@dataclass(frozen=True)
class OptimizeHooks:
    """How an optimize reports as it goes: `warn` the profiles' warnings, `busy(title)` wraps
    reading the workload (a spinner), `searching(evals)` wraps the search and gives what
    hears each evaluation (a progress bar; None: nothing)."""

    warn: Callable[[str], None] = lambda _: None
    busy: Callable[[str], AbstractContextManager[object]] = lambda _: nullcontext()
    searching: Callable[[int], AbstractContextManager[Progress | None]] = lambda _: nullcontext()


@dataclass(frozen=True)
class Optimized:
    """The plan written (at `path`), the search that made it and the SLO it was held to."""

    path: Path
    plan: Plan
    result: SearchResult
    slo: Slo


def optimize(req: OptimizeRequest, hooks: OptimizeHooks | None = None) -> Optimized:
    """Search placements (a MILP inside a Bayesian search), simulate each, write the plan."""
    from planner.app import files
    from planner.app.inputs import calibration
    from planner.app.plans import OptimizeInputs, optimize_plan
    from planner.forkmap import default_workers, fork_map
    from planner.planfile import write_plan
    from planner.schemas import check_pins

    hooks = hooks or OptimizeHooks()
    cl = files.cluster(req.cluster)
    ms = files.models(req.models)
    check_pins(ms, cl, file=str(req.models))
    sl = files.slo(req.slo, ms)
    with hooks.busy(f"reading the workload {req.workload.name} ..."):
        trace = files.workload(req.workload, ms, req.config.seed)
    calib, warnings = calibration(req.profiles)
    for w in warnings:
        hooks.warn(w)
    files.silence_solver_banner()
    out = req.output or Path("plans") / f"{cl.name}.plan.yaml"
    paths = dict(
        cluster=req.cluster,
        models=req.models,
        slo=req.slo,
        workload=req.workload,
        profiles=req.profiles,
    )
    src = OptimizeInputs(cl, ms, sl, trace, calib, paths)
    job_map = fork_map(req.jobs or default_workers())
    with hooks.searching(req.config.evals) as progress:
        plan, result = optimize_plan(
            src, req.config, out=out, progress=progress, clock=time.perf_counter, job_map=job_map
        )
    write_plan(out, plan, cl)
    return Optimized(out, plan, result, sl)
