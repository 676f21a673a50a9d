"""A fake Backend for apply and control tests (processes as dict entries), and the builders
those tests share: an instance as the plan file holds it, a plan, one apply run, its actions."""

from __future__ import annotations

import itertools

from planner.adjuster.apply import apply_point
from planner.adjuster.backends.base import BackendFeature, Handle
from planner.adjuster.state import StateStore
from planner.errors import LaunchError
from planner.schemas.plan import Instance, Plan

MEM = {"weights": 1.0, "kv": 1.0, "overhead": 0.5}


class FakeBackend:
    """Processes as dict entries; `fail` maps instance id -> launch failure reason."""

    name = "fake"

    def __init__(self, supports_sleep: bool = False):
        self.supports_sleep = supports_sleep
        self.alive: dict[int, str] = {}  # pid -> state: up | asleep
        self.fail: dict[str, str] = {}
        self.log: list[tuple[str, str]] = []
        self._pids = itertools.count(1000)

    @property
    def features(self) -> frozenset[BackendFeature]:
        return frozenset({BackendFeature.SLEEP} if self.supports_sleep else ())

    def has_process(self, handle: Handle) -> bool:
        return handle.pid is not None

    def start(self, inst: Instance, *, model_path: str, served_name: str, log_path: str) -> Handle:
        pid = next(self._pids)
        self.alive[pid] = "up"
        self.log.append(("start", inst.id))
        return Handle(inst.id, inst.node, "127.0.0.1", inst.port, pid=pid, log_path=log_path)

    def wait_ready(self, handle: Handle, timeout_s: float) -> None:
        if handle.pid not in self.alive:  # a process that is gone never gets ready
            raise LaunchError(f"{handle.instance_id} exited", reason="unknown")
        reason = self.fail.get(handle.instance_id)
        if reason:
            self.alive.pop(handle.pid, None)
            raise LaunchError(f"{handle.instance_id} failed", reason=reason)

    def stop(self, handle: Handle, timeout_s: float = 30.0) -> None:
        if self.alive.pop(handle.pid, None) is not None:
            self.log.append(("stop", handle.instance_id))

    def is_alive(self, handle: Handle) -> bool:
        return handle.pid in self.alive

    def sleep(self, handle: Handle, level: int) -> None:
        self.alive[handle.pid] = "asleep"
        self.log.append(("sleep", handle.instance_id))

    def wake(self, handle: Handle, level: int) -> None:
        self.alive[handle.pid] = "up"
        self.log.append(("wake", handle.instance_id))

    def gpu_free_gib(self, node: str, gpus: list[int]) -> dict[int, float] | None:
        return None  # no GPUs to read


def inst(iid: str, port: int, gpus=(0,), tier="gpu", variant="bf16") -> dict:
    return {
        "id": iid,
        "model": "m",
        "variant": variant,
        "node": "n",
        "gpus": list(gpus),
        "tp": len(gpus),
        "tier": tier,
        "memory_gib": MEM,
        "port": port,
    }


def plan(*points: tuple[str, list[dict]]) -> Plan:
    return Plan.model_validate(
        {"selected": points[0][0], "points": [{"name": n, "instances": i} for n, i in points]}
    )


def run(p: Plan, point: str | None, be: FakeBackend, st: StateStore):
    return apply_point(
        p,
        point,
        backend=be,
        state=st,
        model_path_resolver=lambda i: "/m",
        backoff_base_s=0.0,
        timeout_s=5,
    )


def acts(res) -> list[tuple[str, str, str]]:
    return [(a.action, a.instance, a.result) for a in res.actions]
