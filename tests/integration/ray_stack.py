"""What the Ray tests' helper scripts share (test_ray_backend.py, test_ray_engine_access.py):
one instance of the tiny model on node-b under a Controller over the Ray backend, and a
Gateway in front of it. The tests copy this file (and waits.py, which it imports) beside
their helper script, which runs in a network namespace of its own."""

from __future__ import annotations

from typing import Any

from waits import ENGINE_START_S

from planner.adjuster.backends.ray import RayBackend
from planner.adjuster.control import Controller
from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread
from planner.adjuster.state import StateStore
from planner.schemas.plan import Plan


def node_b_control(
    model_dir: str, state_dir: str, address: str, port: int, tier: str
) -> tuple[RayBackend, StateStore, Controller]:
    """The Ray backend at `address`, a state store, and a Controller of a plan whose one
    instance (`tiny-b0`, model `tiny`, tier `tier`) runs on node-b at `port`."""
    inst = {
        "id": "tiny-b0",
        "model": "tiny",
        "variant": "main",
        "node": "node-b",
        "gpus": [0],
        "tier": tier,
        "port": port,
        "memory_gib": {"weights": 0.01, "kv": 1.0, "overhead": 0.1},
        "engine": {"max_model_len": 512, "max_num_seqs": 4, "enforce_eager": True},
    }
    plan = Plan.model_validate({"selected": "p", "points": [{"name": "p", "instances": [inst]}]})
    backend = RayBackend(address, device="cpu")
    state = StateStore(state_dir)
    control = Controller(plan, None, backend, state, model_path_resolver=lambda i: model_dir)
    return backend, state, control


def gateway_for(control: Controller, state_dir: str, gw_port: int) -> tuple[Any, Any]:
    """A started Gateway (and its thread) in front of `control` on `gw_port`."""
    gw = Gateway(
        control.point,
        control,
        state_dir=state_dir,
        config=GatewayConfig(wake_timeout_s=ENGINE_START_S),
    )
    return gw, GatewayThread(gw, port=gw_port).start()
