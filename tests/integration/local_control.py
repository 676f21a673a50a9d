"""The real Controller of a plan over the local CPU backend, as the vLLM-CPU tests start it."""

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
