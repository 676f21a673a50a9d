"""`planner explain PLAN`: why each model got its variant, GPUs and tier."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, console, print_json


def register(app: typer.Typer) -> None:
    """Add `explain`."""
    app.command("explain")(explain_cmd)


def explain_cmd(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN", help="plan.yaml")],
    point: Annotated[
        str | None, typer.Option("--point", help="point name; default: the selected one")
    ] = None,
    workload: Annotated[
        Path | None, typer.Option("--workload", help="trace; default: the plan's")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Binding constraints and the next-best alternative for each model of a point."""
    from dataclasses import asdict

    from planner.cli import inputs as inp
    from planner.errors import InputError
    from planner.optimizer.config import OptimizeConfig
    from planner.optimizer.explain import explain
    from planner.optimizer.milp import solve
    from planner.optimizer.search import Searcher, knobs_from_dict
    from planner.schemas import load_plan

    plan = load_plan(plan_path)
    try:
        pt = plan.point(point)
    except KeyError:
        raise InputError(
            f"no point {point!r}",
            file=str(plan_path),
            path="points",
            fix=f"use one of {[p.name for p in plan.points]}",
        ) from None
    knobs_d = plan.search.get("knobs", {}).get(pt.name)
    if knobs_d is None:
        raise InputError(
            f"the plan does not record the search knobs of point {pt.name!r}",
            file=str(plan_path),
            path="search.knobs",
            fix="re-run `planner optimize`",
        )
    paths = {
        k: inp.input_path(workload if k == "workload" else None, plan, plan_path, k)
        for k in ("cluster", "models", "slo", "workload")
    }
    cl, ms, sl = inp.cluster(paths["cluster"]), inp.models(paths["models"]), inp.slo(paths["slo"])
    trace = inp.workload(paths["workload"], ms, int(plan.search.get("seed", 0)))
    prof = plan.inputs.get("profiles")
    cfg = OptimizeConfig(
        seed=int(plan.search.get("seed", 0)),
        max_tp=int(plan.search.get("max_tp", 8)),
        max_replicas=int(plan.search.get("max_replicas", 4)),
    )
    s = Searcher(
        cl,
        ms,
        sl,
        trace,
        cfg,
        scorer=lambda p, q: {},
        calib=inp.calibration(Path(prof.path) if prof else None),
    )
    inp.silence_solver_banner()
    milp_in = s.milp_input(knobs_from_dict(knobs_d))
    res = solve(milp_in, time_limit_s=cfg.milp_time_limit_s)
    exps = explain(milp_in, res, time_limit_s=cfg.milp_time_limit_s)
    if json_out:
        print_json({"point": pt.name, "models": [asdict(e) for e in exps]})
        return
    for e in exps:
        console.print(f"[bold]{e.model}[/]")
        for p in e.placements:
            console.print(f"  runs as {p}")
        for r in e.reasons:
            console.print(f"  - {r}")
        console.print(f"  [dim]{e.alternative}[/]")
