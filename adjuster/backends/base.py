"""The narrow interfaces between the decision code and what runs processes.

`Backend` runs engine processes on one node or across a Ray cluster; `InstanceControl`
is what the gateway and the adjuster call to wake, sleep and inspect instances. The same
decision code runs against the real backends live and against fakes in replay and tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Protocol

from planner.engines.kinds import DEFAULT_KIND
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Instance, Point

Status = Literal["awake", "asleep", "stopped", "starting", "failed"]


class BackendFeature(Enum):
    """What a backend can do; callers ask `features` instead of testing its kind."""

    MULTI_NODE = "multi_node"  # starts instances on every node of the cluster, not this host only
    SLEEP = "sleep"  # sleep/wake keep the process (else a sleeping instance is stopped)
    GPU_MEMORY = "gpu_memory"  # gpu_free_gib reads the devices
    PROCESSES = "processes"  # starts real engine servers (the sim backend records only)


@dataclass
class Handle:
    """How a backend finds a server it started again. `ref` is the backend's opaque reference
    (what callers record and show; `has_process` is the backend's to answer); `pid` and
    `actor` are the local and ray backends' own."""

    instance_id: str
    node: str
    host: str  # address the gateway reaches the server at (127.0.0.1 in tests)
    port: int
    pid: int | None = None  # the local backend's (and the ray agents')
    actor: str | None = None  # Ray actor name, for the ray backend
    log_path: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    engine: str = DEFAULT_KIND  # the instance's engine.kind (planner/engines/)
    # the instance's API key (planner.control_http.auth_headers); kept in the 0600 state
    # DB, never logged
    secret: str = field(default="", repr=False)

    ref: str = ""  # the backend's opaque reference ("": none recorded; see `label`)

    @property
    def label(self) -> str:
        """The reference for messages (`pid 123`, `actor planner-node-a`, a stub's own)."""
        if self.ref:
            return self.ref
        return f"pid {self.pid}" if self.pid is not None else f"actor {self.actor}"

    def auth_headers(self) -> dict[str, str]:
        """What every request the planner sends this server carries (its API key)."""
        from planner.control_http import auth_headers

        return auth_headers(self.secret)


class Backend(Protocol):
    """Starts, stops, sleeps and wakes engine processes.

    Every caller uses exactly these members (no `getattr` defaults): a backend that cannot
    sleep says so with `supports_sleep = False`, one that cannot read GPU memory returns None
    from `gpu_free_gib`.
    """

    name: str

    @property
    def features(self) -> frozenset[BackendFeature]:
        """What this backend can do (on its device)."""
        ...

    @property
    def supports_sleep(self) -> bool:
        """`BackendFeature.SLEEP in features`: `sleep`/`wake` keep the process (vLLM sleep
        mode, CUDA); False: a sleeping instance is a stopped process and `wake` is
        unsupported (start it instead)."""
        ...

    def has_process(self, handle: Handle) -> bool:
        """Whether the handle names a process this backend started (a pid, an actor); `status`
        asks `is_alive` only of those."""
        ...

    def start(self, inst: Instance, *, model_path: str, served_name: str, log_path: str) -> Handle:
        """Spawn the server; returns at once (readiness is `wait_ready`)."""
        ...

    def wait_ready(self, handle: Handle, timeout_s: float) -> None:
        """Block until the engine's ready route answers; raise LaunchError (classified from the
        log) if it dies."""
        ...

    def stop(self, handle: Handle, timeout_s: float = 30.0) -> None:
        """Terminate the server and its children; no error if already gone."""
        ...

    def is_alive(self, handle: Handle) -> bool:
        """Whether the process runs and `/health` answers."""
        ...

    def sleep(self, handle: Handle, level: int) -> None:
        """vLLM sleep mode (level 1: weights to host RAM; 2: discard); without it: stop."""
        ...

    def wake(self, handle: Handle, level: int) -> None:
        """The engine's wake steps after a sleep at `level` (`Engine.wake_steps`: after a
        level 2 the weights are reloaded before it returns); ApplyError without sleep mode."""
        ...

    def gpu_free_gib(self, node: str, gpus: list[int]) -> dict[int, float] | None:
        """Free memory of each listed GPU of `node`, GiB; None where it cannot be read."""
        ...


class InstanceControl(Protocol):
    """What the gateway and the adjuster need from the apply machinery."""

    def status(self) -> dict[str, tuple[Status, Handle | None]]:
        """Instance id -> (status, handle) for the applied point."""
        ...

    def wake(self, instance_id: str, timeout_s: float) -> Handle:
        """Make the instance awake (wake from sleep, or start it); blocks until ready."""
        ...

    def sleep(self, instance_id: str) -> None:
        """Put the instance to sleep at its tier's level (stop on the CPU build)."""
        ...

    def restart(self, instance_id: str, timeout_s: float) -> Handle:
        """Start again an instance whose process died; counts and journals the restart."""
        ...

    def follow(self) -> Point:
        """The point in force (another point of the same plan after `apply`/`adjust`)."""
        ...

    def drained(self) -> str:
        """Why nothing may start or wake (`planner down` ran; the next apply lifts it), or ""."""
        ...


class BackendClass(Protocol):
    """A registered backend (`BACKEND` of its module, adjuster/backends/__init__.py): the
    class `--backend KIND` names."""

    extra: str | None  # the pip extra the backend itself needs (None: none)

    def from_cluster(self, cluster: Cluster | None = None, *, device: str | None = None) -> Backend:
        """The backend for `cluster` (`device` None: the backend finds it out)."""
        ...
