"""A backend without processes for the tests (issue 42 item 3): its handles carry only an
opaque reference (no pid, no actor). Registering it is this module plus one line in
`planner.adjuster.backends._REGISTRY` (the tests add that line with monkeypatch)."""

from __future__ import annotations

import itertools

from planner.adjuster.backends.base import BackendFeature, Handle


class StubBackend:
    name = "stub"
    extra = None

    def __init__(self) -> None:
        self.servers: dict[str, str] = {}  # ref -> up | asleep
        self.calls: list[tuple[str, str]] = []
        self._n = itertools.count(1)

    @classmethod
    def from_cluster(cls, cluster=None, *, device=None) -> StubBackend:
        return cls()

    @property
    def features(self) -> frozenset[BackendFeature]:
        return frozenset({BackendFeature.SLEEP})

    @property
    def supports_sleep(self) -> bool:
        return True

    def has_process(self, handle: Handle) -> bool:
        return handle.ref in self.servers

    def start(self, inst, *, model_path: str, served_name: str, log_path: str) -> Handle:
        ref = f"stub-server-{next(self._n)}"
        self.servers[ref] = "up"
        self.calls.append(("start", inst.id))
        return Handle(inst.id, inst.node, "127.0.0.1", inst.port, ref=ref, engine=inst.engine.kind)

    def wait_ready(self, handle: Handle, timeout_s: float) -> None:
        pass

    def stop(self, handle: Handle, timeout_s: float = 30.0) -> None:
        if self.servers.pop(handle.ref, None) is not None:
            self.calls.append(("stop", handle.instance_id))

    def is_alive(self, handle: Handle) -> bool:
        return handle.ref in self.servers

    def sleep(self, handle: Handle, level: int) -> None:
        self.servers[handle.ref] = "asleep"
        self.calls.append(("sleep", handle.instance_id))

    def wake(self, handle: Handle, level: int) -> None:
        self.servers[handle.ref] = "up"
        self.calls.append(("wake", handle.instance_id))

    def gpu_free_gib(self, node: str, gpus: list[int]) -> dict[int, float] | None:
        return None


BACKEND = StubBackend
