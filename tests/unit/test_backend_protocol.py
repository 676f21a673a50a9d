"""Every backend implements the whole `Backend` Protocol, every controller the whole
`InstanceControl`: same members, same parameters. Callers read them directly, never through
`getattr(..., default)`, so a backend that lacks one fails here, not in production."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from apply_fakes import FakeBackend
from gateway_fakes import EngineBackend, FakeControl

from planner.adjuster.backends.base import Backend, InstanceControl
from planner.adjuster.backends.local import LocalBackend
from planner.adjuster.backends.ray import RayBackend
from planner.adjuster.backends.sim import SimBackend
from planner.adjuster.control import Controller

ROOT = Path(__file__).resolve().parents[2]


def _members(proto: type) -> dict[str, object]:
    out = {k: v for k, v in vars(proto).items() if not k.startswith("_")}
    out.update({k: None for k in getattr(proto, "__annotations__", {})})  # data members
    return out


def _params(fn: object) -> list[tuple[str, object]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    return [(p.name, p.kind) for p in sig.parameters.values()]


def _check(cls: type, proto: type) -> None:
    for name, member in _members(proto).items():
        assert (
            hasattr(cls, name)
            or name in getattr(cls, "__annotations__", {})
            or name in (inspect.signature(cls.__init__).parameters)
            or name == "name"
        ), f"{cls.__name__} lacks {proto.__name__}.{name}"
        impl = getattr(cls, name, None)
        if isinstance(member, property):
            assert isinstance(impl, property) or not callable(impl), f"{cls.__name__}.{name}"
        elif callable(member):
            assert callable(impl), f"{cls.__name__}.{name} is not a method"
            assert _params(impl) == _params(member), f"{cls.__name__}.{name} parameters"


@pytest.mark.parametrize(
    "cls",
    [LocalBackend, RayBackend, SimBackend, FakeBackend, EngineBackend],
    ids=lambda c: c.__name__,
)
def test_each_backend_implements_the_protocol(cls):
    _check(cls, Backend)


@pytest.mark.parametrize("cls", [Controller, FakeControl], ids=lambda c: c.__name__)
def test_each_controller_implements_instance_control(cls):
    _check(cls, InstanceControl)


def test_supports_sleep_is_declared_by_each_backend():
    assert LocalBackend("cpu").supports_sleep is False
    assert LocalBackend("cuda").supports_sleep is True
    assert RayBackend(device="cpu").supports_sleep is False
    assert SimBackend().supports_sleep is True and SimBackend(False).supports_sleep is False
    assert LocalBackend("cpu").gpu_free_gib("n", [0]) is None  # no CUDA: unknown, not free


def test_no_caller_guesses_a_member_with_getattr():
    members = "|".join(sorted({*_members(Backend), *_members(InstanceControl)}))
    pat = re.compile(rf"getattr\([^,]+,\s*[\"']({members})[\"']")
    hits = [
        f"{p.relative_to(ROOT)}:{m.group(0)}"
        for folder in ("adjuster", "cli")
        for p in (ROOT / folder).rglob("*.py")
        for m in pat.finditer(p.read_text())
    ]
    assert hits == []
