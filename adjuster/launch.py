"""Launching one instance: start the server, record it, wait until it answers.

`Launcher` is what `apply` runs for each start and restart, and what the gateway's
`Controller` runs for a wake or a restart: one code path writes the state row (`starting`,
then `awake`, or `failed`), rotates the server log and waits for GPU memory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from planner.adjuster.backends.base import Backend, Handle
from planner.adjuster.reconcile import spec_sha
from planner.adjuster.state import NO_PROCESS, InstanceRow, StateStore
from planner.engines.base import get_engine
from planner.errors import InputError, LaunchError
from planner.schemas.models import Models
from planner.schemas.plan import Instance, Point

ModelPathResolver = Callable[[Instance], str]


def model_path_resolver(models: Models, base_dir: str | Path | None) -> ModelPathResolver:
    """Variant `path` of models.yaml; relative paths resolve against the models file's folder."""
    base = Path(base_dir) if base_dir is not None else None

    def resolve(inst: Instance) -> str:
        try:
            v = models.model(inst.model).variant(inst.variant)
        except KeyError:
            raise InputError(
                f"instance {inst.id!r}: model {inst.model!r} / variant {inst.variant!r} not in models file"
            ) from None
        if not v.path:
            return inst.model  # a hub id equal to the model name
        p = Path(v.path).expanduser()
        if not p.is_absolute() and base is not None and (base / p).exists():
            return str((base / p).resolve())
        return str(p) if p.is_absolute() or p.exists() else v.path

    return resolve


def handle_of(row: InstanceRow) -> Handle:
    """The backend handle recorded for a state row."""
    return Handle(
        instance_id=row.id,
        node=row.node,
        host=row.host,
        port=row.port,
        pid=row.pid,
        actor=row.actor,
        log_path=row.log_path,
        secret=row.secret,
        engine=row.engine,
        ref=row.ref,
    )


def slept_level(row: InstanceRow) -> int:
    """The sleep level a sleeping row's instance went to (its recorded tier's, by its
    engine): what its wake must undo."""
    return get_engine(row.engine).sleep_level(row.tier)


def restart_delay_s(
    row: InstanceRow | None, now: float, *, base_s: float, cap_s: float, stable_s: float
) -> float:
    """Backoff before restarting a crashed instance: base * 2^restarts, capped; 0 after a stable run."""
    if row is None or row.started_at is None or now - row.started_at >= stable_s:
        return 0.0
    return min(cap_s, base_s * (2**row.restarts))


@dataclass
class Launcher:
    """Starts instances of one point through a backend, recording each in the state."""

    plan_sha: str
    point: Point
    backend: Backend
    state: StateStore
    resolve: ModelPathResolver
    timeout_s: float
    gpu_free_timeout_s: float = 60.0
    started: list[str] = field(default_factory=list)  # ids started by this launcher
    handles: dict[str, Handle] = field(default_factory=dict)

    def inst(self, iid: str) -> Instance:
        return next(i for i in self.point.instances if i.id == iid)

    def launch(self, inst: Instance, *, restarts: int) -> Handle:
        """Start one server and wait until it answers; on failure it is stopped and marked failed."""
        self._wait_gpu_memory(inst)
        log = self.state.logs_dir / f"{inst.id}.log"
        if log.exists():  # classification reads the tail: each launch gets a fresh log
            log.replace(log.with_suffix(".log.1"))
        try:
            handle = self.backend.start(
                inst, model_path=self.resolve(inst), served_name=inst.model, log_path=str(log)
            )
        except LaunchError:  # refused before a process ran (its port is held): recorded
            self.state.upsert(self._row(inst, None, "failed", restarts))
            raise
        self.state.upsert(self._row(inst, handle, "starting", restarts))
        self.started.append(inst.id)
        self.handles[inst.id] = handle
        try:
            self.backend.wait_ready(handle, self.timeout_s)
        except LaunchError:
            self.backend.stop(handle, 10.0)
            self.state.update(inst.id, status="failed", **NO_PROCESS)
            raise
        self.state.update(inst.id, status="awake", started_at=time.time())
        return handle

    def _row(self, inst: Instance, h: Handle | None, status: str, restarts: int) -> InstanceRow:
        """The state row of a launch of `inst` (`h` None: no process was started)."""
        return InstanceRow(
            id=inst.id,
            model=inst.model,
            variant=inst.variant,
            node=inst.node,
            host=h.host if h else "127.0.0.1",
            port=inst.port,
            pid=h.pid if h else None,
            actor=h.actor if h else None,
            status=status,
            tier=inst.tier,
            plan_sha=self.plan_sha,
            point=self.point.name,
            started_at=time.time(),
            restarts=restarts,
            log_path=h.log_path if h else "",
            spec_sha=spec_sha(inst),
            gpus=json.dumps(inst.gpus),
            memory_gib=inst.memory_gib.total,
            secret=h.secret if h else None,
            engine=inst.engine.kind,
            ref=h.ref if h else "",
        )

    def _wait_gpu_memory(self, inst: Instance) -> None:
        """Bounded wait until the GPUs have room (CUDA only; a just-stopped server frees late)."""
        if not inst.gpus:
            return
        need_gib = inst.memory_gib.total  # per GPU, GiB
        deadline = time.monotonic() + self.gpu_free_timeout_s
        while True:
            free = self.backend.gpu_free_gib(inst.node, inst.gpus)
            if free is None or all(free.get(g, need_gib) >= need_gib for g in inst.gpus):
                return
            if time.monotonic() >= deadline:
                raise LaunchError(
                    f"{inst.id}: GPUs {inst.gpus} still lack {need_gib:.1f} GiB free after "
                    f"{self.gpu_free_timeout_s:.0f} s (free: {free})",
                    reason="out_of_memory",
                    fix="stop what else runs on those GPUs",
                )
            time.sleep(1.0)
