"""`apply`: make what runs match one point of a plan, step by step, journaled, rolled back on failure.

Holds the state-dir lease for the whole run. Observes (state store + live `/health`), diffs
(`reconcile.diff`), then runs the actions in order. A failing step stops the instances this
run started, keeps the ones that ran before, records the failure and returns it in the
result (the CLI turns it into the exit code). Dead instances are restarted with capped
exponential backoff on consecutive crashes; the count is kept in the state. Running it again
right after a success does nothing.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.adjuster.backends.base import Backend
from planner.adjuster.launch import (  # re-exported: the names apply's callers know
    Launcher,
    ModelPathResolver,
    handle_of,
    model_path_resolver,
    restart_delay_s,
    slept_level,
)
from planner.adjuster.reconcile import PROCESS_DIED, Action, diff
from planner.adjuster.running import PortLookup, blocked_ports, observed_instances, settle
from planner.adjuster.state import NO_PROCESS, InstanceRow, StateStore
from planner.engines.ports import port_held_error
from planner.errors import ApplyError, DrainedError, InputError, LaunchError, PlannerError
from planner.schemas.plan import Plan, Point

DRAINED = "drained by planner down"  # meta `drained` starts with it; the gateway's 503 says it
# Launch failures that the same command cannot fix by trying again.
_PERMANENT = {"bad_model_path", "hub_auth", "max_model_len_too_large", "disk_full"}


@dataclass
class ActionResult:
    """What one action did: result is ok | failed | planned | rolled_back."""

    action: str
    instance: str
    node: str
    result: str
    detail: str = ""


@dataclass
class ApplyResult:
    """The outcome of one apply."""

    point: str
    actions: list[ActionResult] = field(default_factory=list)
    instances: list[dict] = field(default_factory=list)
    error: PlannerError | None = None

    @property
    def ok(self) -> bool:
        """No step failed."""
        return self.error is None

    def to_json(self) -> dict:
        """`{"point", "actions": [...], "instances": [...]}` (+ `error` on failure)."""
        out: dict = {
            "point": self.point,
            "actions": [a.__dict__ for a in self.actions],
            "instances": self.instances,
        }
        if self.error is not None:
            out["error"] = {
                "message": self.error.message,
                "reason": getattr(self.error, "reason", None),
                "kind": type(self.error).__name__,
            }
        return out

    def raise_for_error(self) -> None:
        """Raise the recorded error, if any."""
        if self.error is not None:
            raise self.error


@dataclass
class _Run(Launcher):
    """One apply: the launcher plus the steps, their crash backoff and the rollback."""

    backoff_base_s: float = 1.0
    backoff_cap_s: float = 30.0
    stable_s: float = 120.0
    max_attempts: int = 3
    existed: set[str] = field(default_factory=set)  # ids with a state row before this run

    def do(self, a: Action) -> str:
        """Run one action; returns a short detail."""
        row = self.state.get(a.instance)
        if a.kind == "start":
            h = self.launch(self.inst(a.instance), restarts=0)
            return f"{h.label} port {h.port}"
        if a.kind == "stop":
            if row is not None:
                self.backend.stop(handle_of(row))
                self.state.delete(a.instance)
            return "stopped"
        if a.kind == "sleep":
            h = self.handles.get(a.instance) or (handle_of(row) if row else None)
            if h is None:
                return "not running"
            self.backend.sleep(h, a.level)
            if self.backend.supports_sleep:
                self.state.update(a.instance, status="asleep", tier=self.inst(a.instance).tier)
            else:
                self.state.update(a.instance, status="stopped", **NO_PROCESS)
            return f"level {a.level}"
        if a.kind == "wake":
            if row is None:
                raise ApplyError(f"{a.instance}: nothing to wake")
            self.backend.wake(handle_of(row), slept_level(row))
            self.state.update(a.instance, status="awake", tier=self.inst(a.instance).tier)
            return "awake"
        if a.kind == "restart":
            return self._restart(a, row)
        raise ApplyError(f"unknown action {a.kind!r}")

    def _restart(self, a: Action, row: InstanceRow | None) -> str:
        inst = self.inst(a.instance)
        if row is not None:
            self.backend.stop(handle_of(row), 10.0)
        crashed = a.reason == PROCESS_DIED  # an interrupted start is no crash
        restarts = (row.restarts if row else 0) + (1 if crashed else 0)
        delay = (
            restart_delay_s(
                row,
                time.time(),
                base_s=self.backoff_base_s,
                cap_s=self.backoff_cap_s,
                stable_s=self.stable_s,
            )
            if crashed
            else 0.0
        )
        if row is not None and crashed and delay == 0.0:
            restarts = 1  # it ran long enough: a new crash series
        attempt = 0
        while True:
            if delay > 0:
                time.sleep(delay)
            try:
                h = self.launch(inst, restarts=restarts)
                why = (
                    f"restart {restarts} after a crash, waited {delay:.0f} s"
                    if crashed
                    else a.reason
                )
                return f"{h.label} port {h.port} ({why})"
            except LaunchError as e:
                attempt += 1
                if not crashed or e.reason in _PERMANENT or attempt >= self.max_attempts:
                    raise
                restarts += 1
                delay = min(self.backoff_cap_s, self.backoff_base_s * (2**attempt))
                self.state.journal(
                    "restart", inst.id, inst.node, "retry", f"{e.reason}; next in {delay:.0f} s"
                )

    def rollback(self, failed: str) -> list[ActionResult]:
        """Stop what this run started (newest first); earlier instances stay as they were.

        Instances new to the state are forgotten; the failing one stays recorded as failed.
        """
        out = []
        for iid in reversed(self.started):
            row = self.state.get(iid)
            if row is None or iid == failed:
                continue
            if row.status in ("awake", "asleep", "starting"):
                self.backend.stop(handle_of(row), 10.0)
            if iid in self.existed:
                self.state.update(iid, status="stopped", **NO_PROCESS)
            else:
                self.state.delete(iid)
            self.state.journal("stop", iid, row.node, "rolled_back", "started by the failed apply")
            out.append(
                ActionResult("stop", iid, row.node, "rolled_back", "started by the failed apply")
            )
        return out


def instances_json(state: StateStore, point: Point | None = None) -> list[dict]:
    """Instance rows as JSON-able dicts (the point's instances first, then strays)."""
    rows = {r.id: r for r in state.instances()}
    order = [i.id for i in point.instances] if point else []
    order += [k for k in sorted(rows) if k not in order]
    out = []
    for iid in order:
        r = rows.get(iid)
        if r is None:
            inst = next(i for i in point.instances if i.id == iid) if point else None
            if inst is not None:
                out.append(
                    {
                        "id": iid,
                        "model": inst.model,
                        "node": inst.node,
                        "port": inst.port,
                        "tier": inst.tier,
                        "status": "stopped",
                        "pid": None,
                        "restarts": 0,
                    }
                )
            continue
        out.append(
            {
                "id": r.id,
                "model": r.model,
                "node": r.node,
                "host": r.host,
                "port": r.port,
                "tier": r.tier,
                "status": r.status,
                "pid": r.pid,
                "actor": r.actor,
                "restarts": r.restarts,
                "started_at": r.started_at,
                "log_path": r.log_path,
            }
        )
    return out


# Keyword-only options of one apply (issue 45a's service is to group them).
def apply_point(  # noqa: PLR0913
    plan: Plan,
    point_name: str | None,
    *,
    backend: Backend,
    state: StateStore,
    timeout_s: float = 300.0,
    dry_run: bool = False,
    plan_sha: str = "",
    model_path_resolver: ModelPathResolver,
    lease_wait_s: float = 0.0,
    backoff_base_s: float = 1.0,
    backoff_cap_s: float = 30.0,
    stable_s: float = 120.0,
    max_attempts: int = 3,
    gpu_free_timeout_s: float = 60.0,
    gpu_capacity_gib: dict[tuple[str, int], float] | None = None,
    lease: bool = True,
    undrain: bool = True,
    port_holder: PortLookup | None = None,
    progress: Callable[[str], None] | None = None,
) -> ApplyResult:
    """Reconcile the cluster with `plan`'s point `point_name` (None: the selected one).

    `gpu_capacity_gib` ((node, device) -> usable GiB, from cluster.yaml) lets a new instance
    start beside the one it replaces on the same GPU when both fit (make-before-break);
    without it, the old one is stopped first. `lease=False`: the caller holds the state
    lease already (`planner adjust`, for its whole tick). `undrain=False` (`adjust`): a
    point drained by `planner down` stays down (DrainedError in the result); `apply` lifts it.
    `port_holder` ((node, port) -> who listens there, where the backend can tell): every port of
    the point must be free or held by a server of this state dir, else nothing is done
    (PortHeldError in the result, exit 3). `progress` gets a line as each step begins and
    ends (`planner apply` prints them where no spinner shows: in a pipe, under systemd).
    """
    try:
        point = plan.point(point_name)
    except KeyError:
        raise InputError(
            f"no point {point_name!r} in the plan",
            path="--point",
            fix=f"use one of {[p.name for p in plan.points]}",
        ) from None
    sleep_ok = backend.supports_sleep
    result = ApplyResult(point=point.name)
    if dry_run:
        for a in diff(
            point,
            observed_instances(state, backend),
            sleep_supported=sleep_ok,
            gpu_capacity_gib=gpu_capacity_gib,
        ):
            result.actions.append(ActionResult(a.kind, a.instance, a.node, "planned", a.reason))
        _check_ports(point, state, port_holder, result)
        result.instances = instances_json(state, point)
        return result

    ttl_s = max(600.0, 4 * timeout_s)
    held = (
        state.lease(purpose="apply", ttl_s=ttl_s, wait_s=lease_wait_s)
        if lease
        else contextlib.nullcontext()
    )
    with held:
        # rows left by a killed apply or a crash get their real state first; a start under
        # way (e.g. by the gateway) is waited for rather than started a second time
        seen = settle(state, backend, wait_s=timeout_s)
        if _refused(point, state, port_holder, undrain, result):
            result.instances = instances_json(state, point)
            return result
        actions = diff(point, seen, sleep_supported=sleep_ok, gpu_capacity_gib=gpu_capacity_gib)
        # what this apply is making true: the controllers start nothing outside it meanwhile
        state.set_meta(
            target_point=point.name,
            target_plan_sha=plan_sha,
            target_point_json=point.model_dump_json(),
        )
        run = _Run(
            plan_sha=plan_sha,
            point=point,
            backend=backend,
            state=state,
            resolve=model_path_resolver,
            timeout_s=timeout_s,
            backoff_base_s=backoff_base_s,
            backoff_cap_s=backoff_cap_s,
            stable_s=stable_s,
            max_attempts=max_attempts,
            gpu_free_timeout_s=gpu_free_timeout_s,
            existed={r.id for r in state.instances()},
        )
        if _run_steps(run, actions, result, ttl_s, progress or (lambda line: None)):
            # the desired state every controller follows (Controller.follow): the point as
            # placed here and where each instance's weights are
            state.set_meta(
                point=point.name,
                plan_sha=plan_sha,
                applied_at=str(time.time()),
                point_json=point.model_dump_json(),
                model_paths=json.dumps(_model_paths(point, model_path_resolver)),
            )
        result.instances = instances_json(state, point)
    return result


def _model_paths(point: Point, resolve: ModelPathResolver) -> dict[str, str]:
    """Instance id -> its model path, for every instance the resolver knows."""
    out = {}
    for inst in point.instances:
        with contextlib.suppress(InputError):
            out[inst.id] = resolve(inst)
    return out


def _run_steps(
    run: _Run,
    actions: list[Action],
    result: ApplyResult,
    ttl_s: float,
    progress: Callable[[str], None],
) -> bool:
    """Run the actions in order, each journaled (and told to `progress` as it begins and
    ends); the first failure rolls the run back and stops it (False)."""
    state = run.state
    for k, a in enumerate(actions, 1):
        progress(f"[{k}/{len(actions)}] {a.kind} {a.instance} on {a.node}: {a.reason} ...")
        try:
            detail = run.do(a)
        except Exception as exc:  # any failure of a step rolls the run back
            e = (
                exc
                if isinstance(exc, PlannerError)
                else ApplyError(f"{a.kind} {a.instance}: {type(exc).__name__}: {exc}")
            )
            reason = getattr(e, "reason", "") or type(e).__name__
            state.journal(a.kind, a.instance, a.node, "failed", f"{reason}: {e.message}")
            result.actions.append(ActionResult(a.kind, a.instance, a.node, "failed", reason))
            progress(f"[{k}/{len(actions)}] {a.kind} {a.instance}: failed ({reason}); rolling back")
            result.actions += run.rollback(a.instance)
            result.error = e
            return False
        state.journal(a.kind, a.instance, a.node, "ok", detail)
        result.actions.append(ActionResult(a.kind, a.instance, a.node, "ok", detail))
        progress(f"[{k}/{len(actions)}] {a.kind} {a.instance}: ok ({detail})")
        state.renew_lease(ttl_s)
    return True


def _refused(
    point: Point,
    state: StateStore,
    holder_of: PortLookup | None,
    undrain: bool,
    result: ApplyResult,
) -> bool:
    """Whether this apply must not act: the point is drained and the caller keeps it so
    (DrainedError), or a port of the point is held by another program (PortHeldError).
    Otherwise a drain is lifted (journaled)."""
    drained = state.meta().get("drained", "")
    if drained and not undrain:
        result.error = DrainedError(drained, fix="`planner apply` lifts it")
        return True
    if _check_ports(point, state, holder_of, result):
        return True
    if drained:
        state.set_meta(drained="")
        state.journal("undrain", "", "", "ok", f"apply of point {point.name}")
    return False


def _check_ports(
    point: Point, state: StateStore, holder_of: PortLookup | None, result: ApplyResult
) -> bool:
    """Whether a port of the point is held by another program (`blocked_ports`): each such
    instance gets a `blocked` line and the result a PortHeldError."""
    for inst, h in blocked_ports(point, state, holder_of):
        result.actions.append(ActionResult("check", inst.id, inst.node, "blocked", h.describe()))
        result.error = result.error or port_held_error(h)
    return result.error is not None


def down(state: StateStore, backend: Backend, *, lease_wait_s: float = 0.0) -> list[ActionResult]:
    """Stop every instance this state dir started and forget them, and drain the point: the
    gateway starts and wakes nothing (503 `drained by planner down`) until the next apply."""
    out = []
    with state.lease(purpose="down", wait_s=lease_wait_s):
        meta = state.meta()
        if meta.get("point") and meta.get("plan_path"):  # what `apply --previous` restores
            state.set_meta(
                **{
                    f"previous_{k}": meta.get(k, "")
                    for k in ("plan_path", "point", "plan_sha", "plan_copy")
                }
            )
        for row in state.instances():
            if row.has_process:
                backend.stop(handle_of(row))
            state.delete(row.id)
            state.journal("stop", row.id, row.node, "ok", "down")
            out.append(ActionResult("stop", row.id, row.node, "ok", "down"))
        state.set_meta(
            point="",
            plan_sha="",
            plan_path="",
            drained=DRAINED + time.strftime(" at %Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        )
    return out


__all__ = [
    "ActionResult",
    "ApplyResult",
    "ModelPathResolver",
    "apply_point",
    "down",
    "handle_of",
    "instances_json",
    "model_path_resolver",
    "observed_instances",
    "restart_delay_s",
    "settle",
]
