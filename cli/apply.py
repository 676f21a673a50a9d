"""`planner apply`, `planner status`, `planner down`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.apply_checks import check_host, placed, port_lookup, settle_rows
from planner.cli.common import (
    BackendOpt,
    JsonOpt,
    PlanClusterOpt,
    PlanModelsOpt,
    PointOpt,
    StateDirOpt,
    console,
    err_console,
    open_backend,
    print_json,
    state_backend,
)
from planner.errors import InputError


def load_plan_inputs(
    plan_path: Path,
    cluster_path: Path | None,
    models_path: Path | None,
    point: str | None = None,
):
    """Plan, cluster, models and the models file, the plan checked against them (exit 2):
    `planner.app.inputs.resolve`, the one resolver of a plan's inputs."""
    from planner.app.inputs import resolve

    r = resolve(plan_path, cluster=cluster_path, models=models_path, point=point)
    return r.plan, r.cluster, r.models, r.models_path


def runs_here(be: Any) -> bool:
    """Whether the backend starts every instance on this host (not across nodes)."""
    from planner.adjuster.backends.base import BackendFeature

    return BackendFeature.MULTI_NODE not in be.features


def node_share(
    plan: Any, point: str | None, node: str | None, be: Any, cluster: Any, file: str
) -> tuple[Any, str]:
    """The plan to apply on this host and a note: all of it, or with `--node` that node's share.

    The local backend starts every instance on this host, so a point spread over several
    nodes needs `--node NAME` (this host's share) or `--backend ray`.
    """
    from planner.errors import InputError

    pt = plan.point(point)
    nodes = sorted({i.node for i in pt.instances})
    if node is None:
        if runs_here(be) and len(nodes) > 1:
            raise InputError(
                f"point {pt.name!r} places instances on {len(nodes)} nodes ({', '.join(nodes)}); "
                "the local backend would start them all on this host",
                file=file,
                path="--node",
                fix="pass --node NAME to apply this host's share (run it on each node), or "
                "--backend ray to reach every node",
            )
        return plan, ""
    if not runs_here(be):
        raise InputError(
            "--node picks this host's share for the local backend; the ray backend reaches "
            "every node itself",
            path="--node",
            fix="drop --node, or use --backend local",
        )
    names = [n.name for n in cluster.nodes]
    if node not in names:
        raise InputError(
            f"no node {node!r} in the cluster", path="--node", fix=f"use one of {names}"
        )
    mine = [i for i in pt.instances if i.node == node]
    others = [n for n in nodes if n != node]
    note = f"node {node}: {len(mine)} of the {len(pt.instances)} instances of point {pt.name}"
    if others:
        note += f"; the others run on {', '.join(others)} (apply there with --node NAME)"
    share = pt.model_copy(update={"instances": mine})
    points = [share if p.name == pt.name else p for p in plan.points]
    return plan.model_copy(update={"points": points}), note


def open_controller(
    plan_path: Path,
    point: str | None = None,
    *,
    backend: str | None = None,
    state_dir: Path | None = None,
    cluster: Path | None = None,
    models: Path | None = None,
):
    """A `Controller` (InstanceControl) for the plan's point, as `planner apply` would run it.

    For `planner gateway` and `planner adjust`: same input checks (exit 2 on bad files), same
    backend choice, same state dir. The caller closes `controller.state` when done.
    """
    from planner.adjuster.apply import model_path_resolver
    from planner.adjuster.control import Controller
    from planner.adjuster.state import StateStore
    from planner.io import sha256_file

    plan_path = Path(plan_path)
    plan, cl, mods, models_file = load_plan_inputs(plan_path, cluster, models, point)
    plan, _ = placed(plan, cl, None, state_dir, str(plan_path))
    be = open_backend(state_backend(backend, state_dir), cl)
    return Controller(
        plan, point, be, StateStore(state_dir),
        model_path_resolver=model_path_resolver(mods, models_file.parent),
        plan_sha=sha256_file(plan_path),
    )  # fmt: skip


def _actions_table(result: Any, title: str) -> None:
    from rich.table import Table
    from rich.text import Text  # details may hold brackets: no markup

    t = Table(title=title)
    for c in ("#", "action", "instance", "node", "result", "detail"):
        t.add_column(c)
    for k, a in enumerate(result.actions, 1):
        t.add_row(*(Text(x) for x in (str(k), a.action, a.instance, a.node, a.result, a.detail)))
    console.print(t)


PortBaseOpt = Annotated[
    int | None,
    typer.Option(
        "--port-base", min=1024, max=65535,
        help="First engine port (each node's ports keep their order); kept for the next "
        "apply, the gateway and adjust. Default: the cluster's `ports:`, else the plan's.",
    ),
]  # fmt: skip


def apply_cmd(
    plan_path: Annotated[
        Path | None,
        typer.Argument(metavar="PLAN", help="plan.yaml from `planner optimize`."),
    ] = None,
    point: PointOpt = None,
    backend: BackendOpt = None,
    state_dir: StateDirOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the actions, change nothing.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds to wait for each server to be ready.")
    ] = 300.0,
    cluster: PlanClusterOpt = None,
    models: PlanModelsOpt = None,
    wait_lock: Annotated[
        float, typer.Option("--wait-lock", min=0, help="Seconds to wait for another apply's lease.")
    ] = 0.0,
    node: Annotated[
        str | None,
        typer.Option(
            "--node", help="Apply only this node's instances (this host's share; local backend)."
        ),
    ] = None,
    port_base: PortBaseOpt = None,
    previous: Annotated[
        bool,
        typer.Option(
            "--previous",
            help="Go back to the plan and point in force before the last apply (rollback).",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Make the running vLLM instances match a plan point (start, stop, sleep, restart)."""
    from planner.adjuster.apply import apply_point, model_path_resolver
    from planner.adjuster.backends import gpu_capacity
    from planner.adjuster.state import StateStore
    from planner.io import sha256_file

    plan_path, point, inputs = _which_plan(plan_path, point, previous, state_dir)
    kind = state_backend(backend, state_dir, may_switch=True)
    cluster, models = cluster or inputs.get("cluster"), models or inputs.get("models")
    plan, cl, mods, models_file = load_plan_inputs(plan_path, cluster, models, point)
    plan, base = placed(plan, cl, port_base, state_dir, str(plan_path))
    starts = None if dry_run else "`planner apply` (it starts engines)"
    kinds = {inst.engine.kind for inst in plan.point(point).instances}
    be = open_backend(kind, cl, starts_engines=starts, engines=kinds)
    plan, note = node_share(plan, point, node, be, cl, str(plan_path))
    if runs_here(be):
        check_host(plan, point, node, cl, str(plan_path))
    if note:
        err_console.print(f"note: {note}", highlight=False, markup=False)
    if hasattr(be, "progress"):  # a first start's weight download, under the spinner
        be.progress = lambda line: err_console.print(line, highlight=False, markup=False)
    with StateStore(state_dir, readonly=dry_run) as state:
        kw = dict(
            backend=be, state=state, timeout_s=timeout, dry_run=dry_run,
            plan_sha=sha256_file(plan_path), lease_wait_s=wait_lock,
            model_path_resolver=model_path_resolver(mods, models_file.parent),
            gpu_capacity_gib=gpu_capacity(cl), port_holder=port_lookup(be),
        )  # fmt: skip
        before = state.meta()
        if json_out or dry_run or not err_console.is_terminal:
            # no spinner: a line on stderr per step as it begins and ends (JSON stays on stdout)
            kw["progress"] = None if dry_run else _progress_line
            result = apply_point(plan, point, **kw)  # type: ignore[arg-type]
        else:
            with err_console.status(f"applying point {point or plan.selected} ..."):
                result = apply_point(plan, point, **kw)  # type: ignore[arg-type]
        if not dry_run and result.ok:
            _remember(state, before, result, plan, plan_path, point, node, base)
            state.set_meta(backend=kind)  # status, down, gateway and adjust follow it
    _show(result, json_out, dry_run)
    if result.error is not None:
        from planner.cli.common import print_error

        print_error(str(result.error))
        raise typer.Exit(result.error.exit_code)


def _progress_line(line: str) -> None:
    err_console.print(line, highlight=False, markup=False, soft_wrap=True)


def _which_plan(
    plan_path: Path | None, point: str | None, previous: bool, state_dir: Path | None
) -> tuple[Path, str | None, dict[str, Path]]:
    """The plan file and point to apply: those given, or with `--previous` the ones in
    force before the last apply or `down` (named on stderr before anything happens), with
    the inputs a kept copy of the plan needs."""
    if previous:
        from planner.cli.history import previous_applied

        prev = previous_applied(plan_path, point, state_dir)
        err_console.print(f"restoring {prev.what}", highlight=False, markup=False)
        return prev.plan_path, prev.point, prev.inputs
    if plan_path is None:
        raise InputError(
            "no plan given", path="PLAN", fix="pass plan.yaml, or --previous to roll back"
        )
    return plan_path, point, {}


def _remember(
    state: Any,
    before: Any,
    result: Any,
    plan: Any,
    plan_path: Path,
    point: str | None,
    node: str | None,
    base: int | None,
) -> None:
    """Record what is now in force (plan file, its digest and a copy of it, node, port base)
    for the gateway, adjust, `history` and the next apply, journal it, and keep what was in
    force before for `--previous`."""
    from planner.cli.history import keep_plan_copy, keep_previous

    nodes = {i.node for i in plan.point(point).instances}
    here = node or (next(iter(nodes)) if len(nodes) == 1 else "")
    path = str(plan_path.resolve())
    sha = state.meta().get("plan_sha", "")
    copy = keep_plan_copy(state, plan_path, sha)
    state.set_meta(
        plan_path=path, plan_copy=copy, node=here,
        port_base=str(base) if base is not None else "",
    )  # fmt: skip
    state.journal("apply", "", here, "ok", f"point {result.point} of {path} (sha256 {sha[:12]})")
    keep_previous(state, before, path, result.point)


def _show(result: Any, json_out: bool, dry_run: bool) -> None:
    """Print what an apply did (or would do)."""
    if json_out:
        print_json(result.to_json())
    elif dry_run:
        _actions_table(result, f"planned actions for point {result.point}")
    else:
        for a in result.actions:
            console.print(
                f"{a.action:8} {a.instance:24} {a.node:12} {a.result:12} {a.detail}",
                highlight=False,
                markup=False,
            )
        if result.ok:
            console.print(f"point {result.point}: {len(result.actions)} action(s), up to date")


def _not_running(meta: dict[str, str], known: set[str], be: Any) -> list[dict]:
    """Instances of the applied point without a process (sleeping as stopped, or never started)."""
    from planner.errors import PlannerError
    from planner.schemas import load_plan

    path = meta.get("plan_path", "")
    if not path or not Path(path).is_file():
        return []
    try:
        point = load_plan(path).point(meta.get("point") or None)
    except (PlannerError, KeyError):
        return []
    node = meta.get("node")  # applied with --node: only that node's share runs from here
    sleeps = be.supports_sleep
    return [
        {"id": i.id, "model": i.model, "node": i.node, "tier": i.tier,
         "status": "asleep" if i.tier in ("host", "disk") and not sleeps else "stopped",
         "healthy": False, "host": "", "port": i.port, "pid": None, "uptime_s": None, "restarts": 0}
        for i in point.instances if i.id not in known and (not node or i.node == node)
    ]  # fmt: skip


def status_cmd(
    state_dir: StateDirOpt = None,
    backend: BackendOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Instances this state dir runs: tier, awake/asleep, health, port, uptime."""
    from planner.adjuster.apply import handle_of
    from planner.adjuster.state import StateStore, existing_state_dir

    state_dir = existing_state_dir(state_dir)
    be = open_backend(state_backend(backend, state_dir))
    settle_rows(state_dir, be)
    now = time.time()
    rows = []
    with StateStore(state_dir, readonly=True) as state:
        meta = state.meta()
        for r in state.instances():
            h = handle_of(r)
            healthy = be.has_process(h) and be.is_alive(h)
            up = now - r.started_at if r.started_at and healthy else None
            status = "failed" if r.status in ("awake", "asleep") and not healthy else r.status
            rows.append({
                "id": r.id, "model": r.model, "node": r.node, "tier": r.tier, "status": status,
                "healthy": healthy, "host": r.host, "port": r.port, "pid": r.pid,
                "uptime_s": round(up, 1) if up is not None else None, "restarts": r.restarts,
            })  # fmt: skip
        rows += _not_running(meta, {r["id"] for r in rows}, be)
    failed = [x["id"] for x in rows if x["status"] == "failed"]
    if json_out:
        print_json(
            {"point": meta.get("point", ""), "plan": meta.get("plan_path", ""), "instances": rows}
        )
    else:
        _status_table(rows, meta)
    if failed:  # a script or a health check sees it (`planner logs ID` says why)
        err_console.print(f"failed: {', '.join(failed)}", highlight=False, markup=False)
        raise typer.Exit(1)


def _status_table(rows: list[dict], meta: dict[str, str]) -> None:
    """The human-readable `planner status`."""
    from planner.cli.tables import Col, fit_table

    # At 80 columns the least needed columns go first (pid, uptime, port, ...), never a cut
    # cell; the plan's path stands under the table, where it may wrap.
    cols = [
        Col("instance", "left"), Col("model", "left", drop=3), Col("node", "left"),
        Col("tier", "left"), Col("status", "left"), Col("health", "left", drop=1),
        Col("port", drop=2), Col("pid", drop=6), Col("uptime", drop=5), Col("restarts", drop=4),
    ]  # fmt: skip
    cells = []
    for x in rows:
        up = f"{x['uptime_s']:.0f} s" if x["uptime_s"] is not None else "-"
        cells.append(([
            x["id"], x["model"], x["node"], x["tier"], x["status"],
            "ok" if x["healthy"] else "-", str(x["port"]), str(x["pid"] or "-"), up,
            str(x["restarts"]),
        ], None))  # fmt: skip
    plan = meta.get("plan_path") or "no plan applied"
    console.print(
        fit_table(f"point {meta.get('point') or '-'}", cols, cells, caption=f"plan: {plan}")
    )


def down_cmd(
    state_dir: StateDirOpt = None,
    backend: BackendOpt = None,
    wait_lock: Annotated[
        float, typer.Option("--wait-lock", min=0, help="Seconds to wait for another apply's lease.")
    ] = 0.0,
    json_out: JsonOpt = False,
) -> None:
    """Stop everything this state dir started."""
    from planner.adjuster.apply import down
    from planner.adjuster.state import StateStore, existing_state_dir

    state_dir = existing_state_dir(state_dir)  # a typo must not make a new, empty one
    be = open_backend(state_backend(backend, state_dir))
    with StateStore(state_dir) as state:
        done = down(state, be, lease_wait_s=wait_lock)
    if json_out:
        print_json({"actions": [a.__dict__ for a in done]})
    else:
        for a in done:
            console.print(f"stopped {a.instance} ({a.node})", highlight=False, markup=False)
        console.print(
            f"{len(done)} instance(s) stopped; the gateway starts nothing until the next "
            "`planner apply`"
        )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("apply")(apply_cmd)
    app.command("status")(status_cmd)
    app.command("down")(down_cmd)
