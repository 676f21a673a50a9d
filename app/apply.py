"""The apply-and-status service: `apply` makes the running engines match a plan point (with
`--previous`, the one in force before), `status` says what a state dir runs, `down` stops
it all, `open_controller` gives the gateway and the adjuster the same controller apply would
run. Each checks its inputs (an InputError, exit 2) before any side effect."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.adjuster.apply import ActionResult, ApplyResult
    from planner.adjuster.backends.base import Backend
    from planner.adjuster.control import Controller
    from planner.adjuster.state import StateStore
    from planner.schemas.cluster import Cluster
    from planner.schemas.models import Models
    from planner.schemas.plan import Plan


@dataclass(frozen=True)
class ApplyRequest:
    """What `planner apply` was asked (the flags, parsed)."""

    plan_path: Path | None
    point: str | None = None
    backend: str | None = None
    state_dir: Path | None = None
    dry_run: bool = False
    timeout_s: float = 300.0
    cluster: Path | None = None
    models: Path | None = None
    wait_lock_s: float = 0.0
    node: str | None = None  # this host's share only (local backend)
    port_base: int | None = None
    previous: bool = False  # back to the plan and point in force before the last apply


@dataclass(frozen=True)
class ApplyHooks:
    """How an apply reports as it goes: `say` a line (what --previous restores, the node's
    share, a download's progress), `progress` a line per step (None: none), `busy(title)`
    wraps the apply itself (a spinner; default: nothing)."""

    say: Callable[[str], None] = lambda _: None
    progress: Callable[[str], None] | None = None
    busy: Callable[[str], AbstractContextManager[object]] = lambda _: nullcontext()


def load_plan_inputs(
    plan_path: Path,
    cluster_path: Path | None,
    models_path: Path | None,
    point: str | None = None,
) -> tuple[Plan, Cluster, Models, Path]:
    """Plan, cluster, models and the models file, the plan checked against them (exit 2):
    `planner.app.inputs.resolve`, the one resolver of a plan's inputs."""
    from planner.app.inputs import resolve

    r = resolve(plan_path, cluster=cluster_path, models=models_path, point=point)
    return r.plan, r.cluster, r.models, r.models_path


def runs_here(be: Backend) -> bool:
    """Whether the backend starts every instance on this host (not across nodes)."""
    from planner.adjuster.backends.base import BackendFeature

    return BackendFeature.MULTI_NODE not in be.features


def node_share(
    plan: Plan, point: str | None, node: str | None, be: Backend, cluster: Cluster, file: str
) -> tuple[Plan, str]:
    """The plan to apply on this host and a note: all of it, or with `--node` that node's share.

    The local backend starts every instance on this host, so a point spread over several
    nodes needs `--node NAME` (this host's share) or `--backend ray`.
    """
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
) -> Controller:
    """A `Controller` (InstanceControl) for the plan's point, as `planner apply` would run it.

    For `planner gateway` and `planner adjust`: same input checks (exit 2 on bad files), same
    backend choice, same state dir. The caller closes `controller.state` when done.
    """
    from planner.adjuster.apply import model_path_resolver
    from planner.adjuster.control import Controller
    from planner.adjuster.state import StateStore
    from planner.app.apply_checks import placed
    from planner.app.backends import open_backend, state_backend
    from planner.io import sha256_file

    plan_path = Path(plan_path)
    plan, cl, mods, models_file = load_plan_inputs(plan_path, cluster, models, point)
    plan, _ = placed(plan, cl, None, state_dir, str(plan_path))
    be = open_backend(state_backend(backend, state_dir), cl)
    return Controller(
        plan,
        point,
        be,
        StateStore(state_dir),
        model_path_resolver=model_path_resolver(mods, models_file.parent),
        plan_sha=sha256_file(plan_path),
    )


def apply(req: ApplyRequest, hooks: ApplyHooks | None = None) -> ApplyResult:
    """Make the running engines match the plan point `req` names (start, stop, sleep,
    restart); a dry run only plans the actions. A failure is in the result (`error`)."""
    from planner.adjuster.apply import apply_point, model_path_resolver
    from planner.adjuster.backends import gpu_capacity
    from planner.adjuster.state import StateStore
    from planner.app.apply_checks import check_host, placed, port_lookup
    from planner.app.backends import open_backend, state_backend
    from planner.io import sha256_file

    hooks = hooks or ApplyHooks()
    plan_path, point, inputs = _which_plan(req, hooks.say)
    state_dir, dry_run = req.state_dir, req.dry_run
    kind = state_backend(req.backend, state_dir, may_switch=True)
    cluster, models = req.cluster or inputs.get("cluster"), req.models or inputs.get("models")
    plan, cl, mods, models_file = load_plan_inputs(plan_path, cluster, models, point)
    plan, base = placed(plan, cl, req.port_base, state_dir, str(plan_path))
    starts = None if dry_run else "`planner apply` (it starts engines)"
    kinds = {inst.engine.kind for inst in plan.point(point).instances}
    be = open_backend(kind, cl, starts_engines=starts, engines=kinds)
    plan, note = node_share(plan, point, req.node, be, cl, str(plan_path))
    if runs_here(be):
        check_host(plan, point, req.node, cl, str(plan_path))
    if note:
        hooks.say(f"note: {note}")
    if hasattr(be, "progress"):  # a first start's weight download, under the spinner
        be.progress = hooks.say
    with StateStore(state_dir, readonly=dry_run) as state:
        before = state.meta()
        with hooks.busy(f"applying point {point or plan.selected} ..."):
            result = apply_point(
                plan,
                point,
                backend=be,
                state=state,
                timeout_s=req.timeout_s,
                dry_run=dry_run,
                plan_sha=sha256_file(plan_path),
                lease_wait_s=req.wait_lock_s,
                model_path_resolver=model_path_resolver(mods, models_file.parent),
                gpu_capacity_gib=gpu_capacity(cl),
                port_holder=port_lookup(be),
                progress=None if dry_run else hooks.progress,
            )
        if not dry_run and result.ok:
            remember(state, before, result, plan, plan_path, point, req.node, base)
            state.set_meta(backend=kind)  # status, down, gateway and adjust follow it
    return result


def _which_plan(
    req: ApplyRequest, say: Callable[[str], None]
) -> tuple[Path, str | None, dict[str, Path]]:
    """The plan file and point to apply: those given, or with `--previous` the ones in
    force before the last apply or `down` (named by `say` before anything happens), with
    the inputs a kept copy of the plan needs."""
    if req.previous:
        from planner.app.history import previous_applied

        prev = previous_applied(req.plan_path, req.point, req.state_dir)
        say(f"restoring {prev.what}")
        return prev.plan_path, prev.point, prev.inputs
    if req.plan_path is None:
        raise InputError(
            "no plan given", path="PLAN", fix="pass plan.yaml, or --previous to roll back"
        )
    return req.plan_path, req.point, {}


def remember(
    state: StateStore,
    before: dict[str, str],
    result: ApplyResult,
    plan: Plan,
    plan_path: Path,
    point: str | None,
    node: str | None,
    base: int | None,
) -> None:
    """Record what is now in force (plan file, its digest and a copy of it, node, port base)
    for the gateway, adjust, `history` and the next apply, journal it, and keep what was in
    force before for `--previous`."""
    from planner.app.history import keep_plan_copy, keep_previous

    nodes = {i.node for i in plan.point(point).instances}
    here = node or (next(iter(nodes)) if len(nodes) == 1 else "")
    path = str(plan_path.resolve())
    sha = state.meta().get("plan_sha", "")
    copy = keep_plan_copy(state, plan_path, sha)
    state.set_meta(
        plan_path=path,
        plan_copy=copy,
        node=here,
        port_base=str(base) if base is not None else "",
    )
    state.journal("apply", "", here, "ok", f"point {result.point} of {path} (sha256 {sha[:12]})")
    keep_previous(state, before, path, result.point)


@dataclass(frozen=True)
class InstanceStatus:
    """One instance of `planner status` (its --json keys, in order)."""

    id: str
    model: str
    node: str
    tier: str
    status: str  # awake | asleep | stopped | failed | ...
    healthy: bool
    host: str
    port: int
    pid: int | None
    uptime_s: float | None
    restarts: int


@dataclass(frozen=True)
class Status:
    """What a state dir runs: the point and plan in force ("" when none) and its instances."""

    point: str
    plan: str
    instances: list[InstanceStatus] = field(default_factory=list)

    @property
    def failed(self) -> list[str]:
        return [x.id for x in self.instances if x.status == "failed"]

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def status(state_dir: Path | None, backend: str | None = None) -> Status:
    """The instances this state dir runs (a row an interrupted apply left made true first,
    where it may), and those of the applied point without a process."""
    from planner.adjuster.apply import handle_of
    from planner.adjuster.state import StateStore, existing_state_dir
    from planner.app.apply_checks import settle_rows
    from planner.app.backends import open_backend, state_backend

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
            rows.append(
                InstanceStatus(
                    id=r.id,
                    model=r.model,
                    node=r.node,
                    tier=r.tier,
                    status="failed"
                    if r.status in ("awake", "asleep") and not healthy
                    else r.status,
                    healthy=healthy,
                    host=r.host,
                    port=r.port,
                    pid=r.pid,
                    uptime_s=round(up, 1) if up is not None else None,
                    restarts=r.restarts,
                )
            )
        rows += _not_running(meta, {r.id for r in rows}, be)
    return Status(meta.get("point", ""), meta.get("plan_path", ""), rows)


def _not_running(meta: dict[str, str], known: set[str], be: Backend) -> list[InstanceStatus]:
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
        InstanceStatus(
            id=i.id,
            model=i.model,
            node=i.node,
            tier=i.tier,
            status="asleep" if i.tier in ("host", "disk") and not sleeps else "stopped",
            healthy=False,
            host="",
            port=i.port,
            pid=None,
            uptime_s=None,
            restarts=0,
        )
        for i in point.instances
        if i.id not in known and (not node or i.node == node)
    ]


def down(
    state_dir: Path | None, backend: str | None = None, wait_lock_s: float = 0.0
) -> list[ActionResult]:
    """Stop everything this state dir started (and drain its point until the next apply)."""
    from planner.adjuster.apply import down as stop_all
    from planner.adjuster.state import StateStore, existing_state_dir
    from planner.app.backends import open_backend, state_backend

    state_dir = existing_state_dir(state_dir)  # a typo must not make a new, empty one
    be = open_backend(state_backend(backend, state_dir))
    with StateStore(state_dir) as state:
        return stop_all(state, be, lease_wait_s=wait_lock_s)
