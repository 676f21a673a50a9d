"""Issue 42 items 2 and 3: a second engine kind and a second backend kind, each added with one
module (stub_engine.py, stub_backend.py) and one registry line (added here with monkeypatch),
run through apply, the controller and the state without any other change."""

from __future__ import annotations

import pytest
from engine_fakes import FakeVllm, SleepModeBackend, one_instance_plan

from planner.adjuster import backends
from planner.adjuster.apply import apply_point, down, settle
from planner.adjuster.control import Controller
from planner.adjuster.state import StateStore
from planner.engines import kinds


@pytest.fixture
def stub_engine(monkeypatch):
    monkeypatch.setitem(kinds.ENGINE_MODULES, "stub", "stub_engine")  # the one registry line


@pytest.fixture
def stub_backend(monkeypatch):
    monkeypatch.setitem(backends._REGISTRY, "stub", ("stub_backend", False))  # the one line
    return backends.make_backend("stub")


def test_a_second_engine_kind_is_one_module_and_one_registry_line(stub_engine, tmp_path):
    from planner.engines.base import get_engine

    with pytest.raises(ValueError, match="--listen-port"):  # its own managed flags
        one_instance_plan(8100, kind="stub", extra=["--listen-port", "9"])
    spec = (
        one_instance_plan(8100, kind="stub", extra=get_engine("stub").task_args("embed"))
        .point()
        .instances[0]
    )
    argv, env = get_engine("stub").build_argv(spec, model_path="/w", served_name="m")
    assert argv[2:4] == ["stub_server", "--weights"] and env == {"STUB_KEY": ""}
    assert get_engine("stub").task(spec) == "embed"
    with FakeVllm() as srv, StateStore(tmp_path) as st:
        port = srv.server_address[1]
        ctl = Controller(
            one_instance_plan(port, kind="stub"),
            None,
            SleepModeBackend(srv),
            st,
            model_path_resolver=lambda i: "/m",
        )
        ctl.wake("s0", 5)
        assert st.get("s0").engine == "stub"  # the kind is in the state: not rebuilt as vLLM
        srv.seen.clear()
        ctl.sleep("s0")
        ctl.wake("s0", 5)
        assert srv.seen == ["/pause?depth=2", "/resume", "/load"]  # its own sleep and wake


def test_the_extras_check_asks_for_the_plans_engine_package(stub_engine):
    """A plan of the stub kind needs the stub's module, not vLLM's (the engine's `package`)."""
    from planner.cli.common import engine_modules, require_extra
    from planner.errors import MissingExtraError

    assert engine_modules(["stub", "vllm", "stub"]) == ("stub_server", "vllm")
    assert engine_modules() == ("vllm",)  # the default kind
    with pytest.raises(MissingExtraError, match="stub_server"):
        require_extra("serve-cpu", "`planner apply`", engine_modules({"stub"}))


def test_a_backend_without_processes_is_one_module_and_one_registry_line(stub_backend, tmp_path):
    """Its handles hold only an opaque reference. Before: callers tested `pid`/`actor`, so
    settle marked its servers failed and a wake started a second server instead of waking."""
    be = stub_backend
    plan = one_instance_plan(8100, tier="host", kind="vllm")
    with StateStore(tmp_path) as st:
        res = apply_point(
            plan, None, backend=be, state=st, timeout_s=5, model_path_resolver=lambda i: "/m"
        )
        assert res.ok, res.error
        row = st.get("s0")
        assert (row.pid, row.actor, row.ref) == (None, None, "stub-server-1")
        assert be.calls == [("start", "s0"), ("sleep", "s0")]  # a host-tier instance sleeps
        assert settle(st, be)["s0"].status == "asleep"
        ctl = Controller(plan, None, be, st, model_path_resolver=lambda i: "/m")
        assert ctl.status()["s0"][0] == "asleep"
        assert ctl.wake("s0", 5).ref == "stub-server-1"  # woken, not started again
        assert be.calls[2:] == [("wake", "s0")] and ctl.status()["s0"][0] == "awake"
        assert [a.instance for a in down(st, be)] == ["s0"]
        assert be.calls[-1] == ("stop", "s0") and be.servers == {}
