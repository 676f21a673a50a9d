"""`InstanceControl` for the gateway and the adjuster: wake, sleep and inspect the applied point.

Without sleep mode (the CPU build) a sleeping instance is a stopped process: `wake` starts
it and `sleep` stops it. Wakes do not take the apply lease (the gateway runs for days); the
gateway serialises wakes per model, and state rows are written in their own transactions.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time

from planner.adjuster.backends.base import Backend, Handle, Status
from planner.adjuster.launch import Launcher, ModelPathResolver, handle_of, slept_level
from planner.adjuster.reconcile import sleep_level
from planner.adjuster.state import NO_PROCESS, InstanceRow, StateStore
from planner.engines.process import pid_alive
from planner.errors import ApplyError, DrainedError, InputError
from planner.schemas.plan import Instance, Plan, Point


def _recorded_paths(paths: dict[str, str], fallback: ModelPathResolver) -> ModelPathResolver:
    """The model paths an apply recorded per instance id (`fallback` for any it did not)."""

    def resolve(inst: Instance) -> str:
        return paths.get(inst.id) or fallback(inst)

    return resolve


class Controller:
    """Wake/sleep/status of the instances of one plan point through a backend."""

    def __init__(
        self,
        plan: Plan,
        point: str | None,
        backend: Backend,
        state: StateStore,
        *,
        model_path_resolver: ModelPathResolver,
        plan_sha: str = "",
        start_timeout_s: float = 300.0,
    ):
        try:
            self.point: Point = plan.point(point)
        except KeyError:
            raise InputError(f"no point {point!r} in the plan", path="--point") from None
        self.plan = plan
        self.backend = backend
        self.state = state
        self.resolve = self._given_resolve = model_path_resolver
        self.plan_sha = plan_sha
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()  # one state writer per process

    @property
    def supports_sleep(self) -> bool:
        """Whether sleeping keeps the process (CUDA)."""
        return self.backend.supports_sleep

    def follow(self) -> Point:
        """The point in force: what `planner apply` (or `adjust`) last made true in this state
        dir, of this plan or of another one (its placed instances are recorded at apply,
        with their model paths); the point given at start until an apply records one. After
        `planner down` the last point stays (nothing starts: `drained`)."""
        meta = self.state.meta()
        name, sha = meta.get("point", ""), meta.get("plan_sha", "")
        if not name or (name, sha) == (self.point.name, self.plan_sha):
            return self.point
        recorded = meta.get("point_json", "")
        if recorded:
            self.point = Point.model_validate_json(recorded)
            paths = json.loads(meta.get("model_paths") or "{}")
            self.resolve = _recorded_paths(paths, self._given_resolve)
            self.plan_sha = sha
        elif sha == self.plan_sha:
            with contextlib.suppress(KeyError):
                self.point = self.plan.point(name)
        return self.point

    def _in_force(self, instance_id: str) -> Instance:
        """The instance as the point in force has it; ApplyError when that point has no such
        instance (an apply removed it: it is never started again from here)."""
        self.follow()
        try:
            inst = self.instance(instance_id)
        except KeyError:
            raise ApplyError(
                f"{instance_id} is not in the point in force ({self.point.name}): not started"
            ) from None
        meta = self.state.meta()
        target = meta.get("target_point_json", "")
        if target and meta.get("target_point") and self._lease_live():
            # an apply is at work: what it is about to make true counts too
            ids = {i.id for i in Point.model_validate_json(target).instances}
            if instance_id not in ids:
                raise ApplyError(
                    f"{instance_id} is not in the point an apply is making true "
                    f"({meta['target_point']}): not started"
                )
        return inst

    def drained(self) -> str:
        """Why nothing may start or wake (`planner down` ran, no apply since), or ""."""
        return self.state.meta().get("drained", "")

    def _refuse_if_drained(self) -> None:
        why = self.drained()
        if why:
            raise DrainedError(why, fix="`planner apply` lifts it")

    def instance(self, instance_id: str) -> Instance:
        """The plan's Instance (KeyError if not in the point)."""
        for i in self.point.instances:
            if i.id == instance_id:
                return i
        raise KeyError(instance_id)

    def cotenants(self, instance_id: str) -> list[str]:
        """Other host/disk-tier instances sharing a GPU with this one (to sleep before waking it)."""
        me = self.instance(instance_id)
        return [
            i.id
            for i in self.point.instances
            if i.id != me.id
            and i.node == me.node
            and i.tier in ("host", "disk")
            and set(i.gpus) & set(me.gpus)
        ]

    def status(self) -> dict[str, tuple[Status, Handle | None]]:
        """Instance id -> (status, handle) for every instance of the point."""
        out: dict[str, tuple[Status, Handle | None]] = {}
        for inst in self.point.instances:
            row = self.state.get(inst.id)
            lazy = inst.tier in ("host", "disk")
            if row is None or row.status in ("stopped", "failed") or not row.has_process:
                status: Status = (
                    "asleep"
                    if lazy and not self.supports_sleep
                    else ("failed" if row is not None and row.status == "failed" else "stopped")
                )
                out[inst.id] = (status, None)
                continue
            h = handle_of(row)
            if row.status == "starting":
                out[inst.id] = ("starting", h)
            elif self.backend.is_alive(h):
                out[inst.id] = ("asleep" if row.status == "asleep" else "awake", h)
            else:
                out[inst.id] = ("failed", None)
        return out

    def wake(self, instance_id: str, timeout_s: float) -> Handle:
        """Make the instance awake (wake from sleep, or start it); blocks until ready.

        An instance that another process is bringing up (`_theirs`) is waited for, not
        started a second time beside it.
        """
        with self._lock:
            self._refuse_if_drained()
            inst = self._in_force(instance_id)
            row = self.state.get(instance_id)
            if row is not None and row.has_process and row.status in ("awake", "asleep"):
                h = handle_of(row)
                if self.backend.is_alive(h):
                    if row.status == "asleep":
                        self.backend.wake(h, slept_level(row))
                        self.state.update(instance_id, status="awake")
                        self.state.journal("wake", inst.id, inst.node, "ok", "woken")
                    return h
            h = self._theirs(instance_id, timeout_s)
            if h is not None:
                return h
            inst = self._in_force(instance_id)  # an apply may have ended meanwhile
            row = self.state.get(instance_id)
            return self._launch(inst, row, timeout_s, "wake", row.restarts if row else 0)

    def restart(self, instance_id: str, timeout_s: float) -> Handle:
        """Start again an instance whose process died: one more restart in its state row
        (`planner status`), journaled as `restart`. The caller (the gateway) spaces the
        restarts of a crash loop with its own backoff."""
        with self._lock:
            self._refuse_if_drained()
            inst = self._in_force(instance_id)
            h = self._theirs(instance_id, timeout_s)
            if h is not None:
                return h
            inst = self._in_force(instance_id)  # an apply may have ended meanwhile
            row = self.state.get(instance_id)
            return self._launch(inst, row, timeout_s, "restart", (row.restarts if row else 0) + 1)

    def _theirs(self, instance_id: str, timeout_s: float) -> Handle | None:
        """The instance as another process brings it up: one it is starting (a row left
        `starting`), or any while it holds the state lease (`planner apply`/`adjust` may be
        restarting it): wait for it to be up rather than start a second server beside it.
        None when nobody else is at work on it (or it did not come up): start it ourselves."""
        deadline = time.monotonic() + timeout_s
        while True:
            row = self.state.get(instance_id)
            if row is not None and row.has_process:
                h = handle_of(row)
                if row.status == "starting":
                    with contextlib.suppress(ApplyError):  # it died starting: look again
                        self.backend.wait_ready(h, max(1.0, deadline - time.monotonic()))
                        return h
                elif row.status == "awake" and self.backend.is_alive(h):
                    return h
            if not self._lease_elsewhere() or time.monotonic() > deadline:
                return None
            time.sleep(0.5)

    def _lease_live(self) -> bool:
        """Whether any live process (this one included) holds the state lease."""
        lease = self.state.lease_holder()
        if lease is None or lease.expires_at <= time.time():
            return False
        return lease.holder_host != self.state.host or pid_alive(
            lease.holder_pid, running_at=lease.acquired_at
        )

    def _lease_elsewhere(self) -> bool:
        """Whether another live process holds the state lease (an apply or adjust running)."""
        lease = self.state.lease_holder()
        if lease is None or lease.expires_at <= time.time():
            return False
        if lease.holder_host != self.state.host:
            return True
        return lease.holder_pid != os.getpid() and pid_alive(
            lease.holder_pid, running_at=lease.acquired_at
        )

    def _launch(
        self, inst: Instance, row: InstanceRow | None, timeout_s: float, kind: str, restarts: int
    ) -> Handle:
        """Stop what the row recorded, start the instance, journal it (the caller holds the lock)."""
        if row is not None and row.has_process:
            self.backend.stop(handle_of(row), 10.0)
        try:
            h = self._run(timeout_s).launch(inst, restarts=restarts)
        except ApplyError as e:
            self.state.journal(kind, inst.id, inst.node, "failed", str(getattr(e, "reason", e)))
            raise
        why = f"restart {restarts}: the process died" if kind == "restart" else "started"
        self.state.journal(kind, inst.id, inst.node, "ok", f"{why}; {h.label}")
        return h

    def sleep(self, instance_id: str) -> None:
        """Put the instance to sleep at its tier's level (stop it without sleep mode)."""
        inst = self.instance(instance_id)
        with self._lock:
            row = self.state.get(instance_id)
            if row is None or not row.has_process:
                return
            h = handle_of(row)
            if self.supports_sleep:
                self.backend.sleep(h, sleep_level(inst))
                self.state.update(instance_id, status="asleep")
            else:
                self.backend.stop(h, 10.0)
                self.state.update(instance_id, status="stopped", **NO_PROCESS)
            self.state.journal("sleep", inst.id, inst.node, "ok", f"level {sleep_level(inst)}")

    def _run(self, timeout_s: float) -> Launcher:
        return Launcher(
            plan_sha=self.plan_sha,
            point=self.point,
            backend=self.backend,
            state=self.state,
            resolve=self.resolve,
            timeout_s=timeout_s or self.start_timeout_s,
        )

    def describe(self) -> list[dict]:
        """Status rows for `planner status`: id, model, tier, status, health, port, uptime."""
        now = time.time()
        out = []
        st = self.status()
        for inst in self.point.instances:
            status, h = st[inst.id]
            row = self.state.get(inst.id)
            up = (
                now - row.started_at
                if row and row.started_at and status in ("awake", "asleep")
                else None
            )
            out.append(
                {
                    "id": inst.id,
                    "model": inst.model,
                    "node": inst.node,
                    "tier": inst.tier,
                    "status": status,
                    "healthy": status in ("awake", "asleep"),
                    "port": inst.port,
                    "pid": h.pid if h else None,
                    "uptime_s": round(up, 1) if up is not None else None,
                    "restarts": row.restarts if row else 0,
                    "gpus": json.dumps(inst.gpus),
                }
            )
        return out
