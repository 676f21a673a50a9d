"""The real `Gateway` over a control that reports one stub upstream as its one awake
instance (`tiny-a`), for the benches that measure the gateway's own CPU against a stub."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.adjuster.gateway import Gateway


def stub_gateway(state: Path, keys: Path, upstream: int) -> Gateway:
    """A gateway with keys on (`keys`) whose only instance, always awake, is 127.0.0.1:`upstream`."""
    from planner.adjuster.backends.base import Handle
    from planner.adjuster.gateway import Gateway, GatewayConfig
    from planner.adjuster.gateway.auth import Auth
    from planner.schemas.plan import Instance, MemoryGib, Point

    spec = Instance(
        id="tiny-a-0",
        model="tiny-a",
        variant="bf16",
        node="local",
        gpus=[0],
        tp=1,
        tier="gpu",
        memory_gib=MemoryGib(weights=1, kv=1, overhead=0.5),
        port=upstream,
    )
    point = Point(name="bench", instances=[spec])
    handle = Handle(instance_id=spec.id, node="local", host="127.0.0.1", port=upstream)

    class Control:  # the stub is always awake: no wake, sleep or restart is ever asked
        def status(self):
            return {spec.id: ("awake", handle)}

        def follow(self):
            return point

        def drained(self):
            return ""

    auth = Auth.open(state, keys, model_names=["tiny-a"])
    return Gateway(point, Control(), state_dir=state, config=GatewayConfig(), auth=auth)
