"""The real Controller of a plan over the local CPU backend, as the gateway tests start it,
and a recording wrapper of it."""

from __future__ import annotations

from pathlib import Path

from planner.adjuster.apply import model_path_resolver
from planner.adjuster.backends.local import LocalBackend
from planner.adjuster.control import Controller
from planner.adjuster.state import StateStore
from planner.schemas import load_models, load_plan


def local_control(d: Path, plan: Path, **kw) -> tuple[StateStore, LocalBackend, Controller]:
    """State in `d/state`, the local backend on the CPU, and the Controller of `plan` (model
    paths from `d/models.yaml`; `kw`: the Controller's options)."""
    state = StateStore(d / "state")
    backend = LocalBackend("cpu")
    resolver = model_path_resolver(load_models(d / "models.yaml"), d)
    control = Controller(load_plan(plan), None, backend, state, model_path_resolver=resolver, **kw)
    return state, backend, control


class Recording:
    """The real Controller, with its `record` calls (wake, sleep, restart) recorded in order;
    `done_only`: only those it carried out (a refused one, e.g. while drained, raises)."""

    def __init__(
        self, inner: Controller, record=("wake", "sleep", "restart"), *, done_only: bool = False
    ):
        self.inner, self.record, self.done_only = inner, record, done_only
        self.calls: list[tuple[str, str]] = []

    def _call(self, what: str, instance_id: str, *args):
        if what in self.record and not self.done_only:
            self.calls.append((what, instance_id))
        out = getattr(self.inner, what)(instance_id, *args)
        if what in self.record and self.done_only:
            self.calls.append((what, instance_id))
        return out

    def wake(self, instance_id: str, timeout_s: float):
        return self._call("wake", instance_id, timeout_s)

    def sleep(self, instance_id: str) -> None:
        self._call("sleep", instance_id)

    def restart(self, instance_id: str, timeout_s: float):
        return self._call("restart", instance_id, timeout_s)

    def status(self):
        return self.inner.status()

    def follow(self):
        return self.inner.follow()

    def drained(self) -> str:
        return self.inner.drained()
