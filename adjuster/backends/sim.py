"""A backend without processes: what `planner adjust --replay` applies hops to.

The replay runs the same `live.tick` as the live adjuster, so a hop is the same
`apply_point` against this backend: the reconcile diff is computed and every step is
recorded, but nothing starts; what the steps cost comes from the perf model
(`observe.cost_of_steps`). `supports_sleep` says which engine it stands for (True: CUDA
with sleep mode, as the plans are made for).
"""

from __future__ import annotations

import itertools
from typing import ClassVar

from planner.adjuster.backends.base import BackendClass, BackendFeature, Handle
from planner.errors import ApplyError, LaunchError
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Instance


class SimBackend:
    """Processes as entries of a dict: pid -> `up` | `asleep`."""

    name = "sim"
    extra: ClassVar[str | None] = None

    def __init__(self, supports_sleep: bool = True):
        self._sleep = supports_sleep
        self.alive: dict[int, str] = {}
        self._pids = itertools.count(1)

    @classmethod
    def from_cluster(
        cls, cluster: Cluster | None = None, *, device: str | None = None
    ) -> SimBackend:
        """Nothing starts; sleep mode unless the cluster is CPU-only (as the engines would)."""
        return cls(supports_sleep=device != "cpu")

    @property
    def features(self) -> frozenset[BackendFeature]:
        """Stands for any node; sleeps as the engine it stands for would."""
        return frozenset(
            {BackendFeature.MULTI_NODE} | ({BackendFeature.SLEEP} if self._sleep else set())
        )

    @property
    def supports_sleep(self) -> bool:
        return BackendFeature.SLEEP in self.features

    def has_process(self, handle: Handle) -> bool:
        return handle.pid in self.alive

    def start(self, inst: Instance, *, model_path: str, served_name: str, log_path: str) -> Handle:
        pid = next(self._pids)
        self.alive[pid] = "up"
        return Handle(inst.id, inst.node, "127.0.0.1", inst.port, pid=pid, log_path=log_path)

    def wait_ready(self, handle: Handle, timeout_s: float) -> None:
        if handle.pid not in self.alive:
            raise LaunchError(f"{handle.instance_id} is not running", reason="unknown")

    def stop(self, handle: Handle, timeout_s: float = 30.0) -> None:
        self.alive.pop(handle.pid or -1, None)

    def is_alive(self, handle: Handle) -> bool:
        return handle.pid in self.alive

    def sleep(self, handle: Handle, level: int) -> None:
        if not self._sleep:
            self.stop(handle)
            return
        self.alive[handle.pid or -1] = "asleep"

    def wake(self, handle: Handle, level: int) -> None:
        if not self._sleep:
            raise ApplyError(f"{handle.instance_id}: no sleep mode; start the instance instead")
        self.alive[handle.pid or -1] = "up"

    def gpu_free_gib(self, node: str, gpus: list[int]) -> dict[int, float] | None:
        return None


BACKEND: BackendClass = SimBackend
