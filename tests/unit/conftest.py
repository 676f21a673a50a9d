"""Fixtures the unit tests share: gateways over fake engines (gateway_fakes.py).

Helpers that are plain functions and classes live in modules beside this one, named for what
they hold (gateway_fakes, apply_fakes, engine_fakes, optimizer_builders, plan_files,
adjust_helpers, cli_helpers, waits); no test module imports another (test_test_layout.py).
"""

from __future__ import annotations

import gateway_fakes
import pytest
from gateway_fakes import inst

from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread
from planner.adjuster.gateway.auth import Auth
from planner.engines.process import free_port
from planner.schemas.plan import Point


@pytest.fixture
def setup(tmp_path):
    """Start a gateway over fake engines: yields a factory (instances, awake ids, config) that
    returns the gateway thread and its FakeControl."""
    made = []

    def make(instances, awake, *, wake_delay_s=0.0, sleep_delay_s=0.0, **cfg):
        point = Point(name="p", instances=instances)
        # looked up at call time: a test may monkeypatch gateway_fakes.FakeControl
        ctl = gateway_fakes.FakeControl(point, set(awake), wake_delay_s, sleep_delay_s)
        conf = GatewayConfig(log_flush_s=0.05, **cfg)
        gw = Gateway(point, ctl, state_dir=tmp_path, config=conf)
        th = GatewayThread(gw, port=free_port()).start()
        made.append((th, ctl))
        return th, ctl

    yield make
    for th, ctl in made:
        th.stop()
        ctl.close()


@pytest.fixture
def gateway(tmp_path):
    """Factory: a gateway with keys over awake fake engines of models a and b, with `auth_kw`
    for Auth; returns the gateway thread."""
    made = []

    def make(config: GatewayConfig | None = None, **auth_kw):
        point = Point(name="p", instances=[inst("a0", "a", [0]), inst("b0", "b", [1])])
        ctl = gateway_fakes.FakeControl(point, {"a0", "b0"})
        auth = Auth.open(tmp_path, model_names=["a", "b"], **auth_kw)
        cfg = config or GatewayConfig(log_flush_s=0.05)
        gw = Gateway(point, ctl, state_dir=tmp_path, config=cfg, auth=auth)
        th = GatewayThread(gw, port=free_port()).start()
        made.append((th, ctl))
        return th

    yield make
    for th, ctl in made:
        th.stop()
        ctl.close()
