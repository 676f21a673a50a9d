"""A real Controller over the local CPU backend behind a real Gateway, for the vLLM-CPU tests
of the gateway (test_gateway_vllm.py, test_runtime_vllm.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

from local_control import local_control

from planner.adjuster.apply import down
from planner.adjuster.control import Controller
from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread


class Recording:
    """The real Controller, with its wake/sleep/restart calls recorded in order. `done_only`:
    only the wakes and restarts it carried out (a refused one, e.g. while drained, raises and
    is not recorded), no sleeps; else every call as it is made."""

    def __init__(self, inner: Controller, *, done_only: bool = False):
        self.inner = inner
        self.done_only = done_only
        self.calls: list[tuple[str, str]] = []

    def _call(self, what: str, instance_id: str, *args):
        if not self.done_only:
            self.calls.append((what, instance_id))
        out = getattr(self.inner, what)(instance_id, *args)
        if self.done_only and what != "sleep":
            self.calls.append((what, instance_id))
        return out

    def status(self):
        return self.inner.status()

    def wake(self, instance_id: str, timeout_s: float):
        return self._call("wake", instance_id, timeout_s)

    def sleep(self, instance_id: str) -> None:
        self._call("sleep", instance_id)

    def restart(self, instance_id: str, timeout_s: float):
        return self._call("restart", instance_id, timeout_s)

    def follow(self):
        return self.inner.follow()

    def drained(self) -> str:
        return self.inner.drained()


@contextlib.contextmanager
def local_gateway(
    d: Path, cfg: GatewayConfig, port: int, *, done_only: bool = False
) -> Iterator[SimpleNamespace]:
    """`d/plan.yaml` (models from `d/models.yaml`) under a recorded Controller on the local
    CPU backend, state in `d/state`, behind a Gateway on `port`; on exit the gateway stops
    and every engine goes down."""
    state, backend, inner = local_control(d, d / "plan.yaml")
    control = Recording(inner, done_only=done_only)
    gateway = Gateway(control.inner.point, control, state_dir=d / "state", config=cfg)
    th = GatewayThread(gateway, port=port).start()
    try:
        yield SimpleNamespace(state=state, control=control, gw=gateway, th=th)
    finally:
        th.stop()
        down(state, backend)
        state.close()
