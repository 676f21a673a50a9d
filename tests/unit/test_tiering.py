"""One tiering rule: the gateway and the simulator's router make the same choices.

Each situation (the point's instances, which are awake, their requests in flight, the model
requested) goes to both: the gateway's own choice (`Proxy.choose`, `Waker.plan`) and the
router's (`Router.route`, which performs the wake). Both must name the same instance to
serve, to wake and to put to sleep, and the expected one.
"""

from __future__ import annotations

import math

import pytest
from test_gateway import FakeControl

from planner.adjuster.backends.base import Handle
from planner.adjuster.gateway import Gateway
from planner.optimizer.sim.event import Timeline
from planner.optimizer.sim.router import Router, Slot
from planner.schemas.plan import Instance, MemoryGib, Point


class _Engine:
    """What the router asks of an engine: requests in flight, when it is free."""

    def __init__(self, n: int):
        self.n, self.free_s = n, 0.0

    def outstanding(self, t_s: float) -> int:
        return self.n

    def drain(self) -> float:
        return 0.0


# (id, model, gpus, tier, awake, in flight)
SITUATIONS = {
    "least loaded of two awake": (
        [("a0", "a", [0], "gpu", True, 3), ("a1", "a", [1], "gpu", True, 1)],
        "a", ("a1", None, []),
    ),
    "ties go to plan order": (
        [("a0", "a", [0], "gpu", True, 2), ("a1", "a", [1], "gpu", True, 2)],
        "a", ("a0", None, []),
    ),
    "a wake puts the awake lazy co-tenant to sleep": (
        [("a0", "a", [0], "host", True, 0), ("b0", "b", [0], "host", False, 0)],
        "b", ("b0", "b0", ["a0"]),
    ),
    "wake the instance that displaces nobody": (
        [("a0", "a", [0], "host", True, 0), ("b0", "b", [0], "host", False, 0),
         ("b1", "b", [1], "disk", False, 0)],
        "b", ("b1", "b1", []),
    ),
    "then the one whose displaced co-tenants are idle": (
        [("a0", "a", [0], "host", True, 2), ("c0", "c", [1], "host", True, 0),
         ("b0", "b", [0], "host", False, 0), ("b1", "b", [1], "host", False, 0)],
        "b", ("b1", "b1", ["c0"]),
    ),
    "a gpu-tier co-tenant is never put to sleep": (
        [("g0", "g", [0], "gpu", True, 5), ("b0", "b", [0], "host", False, 0)],
        "b", ("b0", "b0", []),
    ),
    "a wake on two GPUs displaces the lazy co-tenants of both": (
        [("a0", "a", [0], "host", True, 0), ("c0", "c", [1], "disk", True, 1),
         ("b0", "b", [0, 1], "host", False, 0), ("d0", "d", [2], "host", True, 0)],
        "b", ("b0", "b0", ["a0", "c0"]),
    ),
    "a gpu-tier instance coming back displaces nobody": (
        [("g0", "g", [0], "gpu", False, 0), ("a0", "a", [0], "host", True, 2)],
        "g", ("g0", "g0", []),
    ),
    "an asleep instance of the model is not routed to": (
        [("a0", "a", [0], "host", False, 0), ("a1", "a", [1], "host", True, 4)],
        "a", ("a1", None, []),
    ),
}  # fmt: skip


def _point(rows) -> Point:
    return Point(
        name="p",
        instances=[
            Instance(id=i, model=m, variant="v", node="n", gpus=g, tp=len(g), tier=t,
                     memory_gib=MemoryGib(weights=1, kv=1, overhead=0), port=9000 + k)
            for k, (i, m, g, t, _, _) in enumerate(rows)
        ],
    )  # fmt: skip


def _gateway_choice(rows, model, tmp_path):
    point = _point(rows)
    gw = Gateway(point, FakeControl(point, set()), state_dir=tmp_path)
    for iid, _, _, _, awake, n in rows:
        inst = gw.pool.instances[iid]
        inst.status = "awake" if awake else "asleep"
        inst.handle = Handle(iid, "n", "127.0.0.1", inst.spec.port) if awake else None
        inst.outstanding = n
    served = gw.proxy.choose(model)
    if served is not None:
        return served.spec.id, None, []
    target, victims = gw.waker.plan(model)
    return target.spec.id, target.spec.id, [v.spec.id for v in victims]


def _router_choice(rows, model):
    models = sorted({r[1] for r in rows})
    slots = [
        Slot(index=k, id=i, model=models.index(m), tier=t, gpus=tuple(("n", x) for x in g),
             awake_gib=2.0, context_gib=0.5, wake_s=1.0, sleep_s=0.5, engine_delay_s=0.0,
             engine=_Engine(n), awake=awake, ready_s=-math.inf)
        for k, (i, m, g, t, awake, n) in enumerate(rows)
    ]  # fmt: skip
    by_model: dict[int, list[int]] = {}
    for s in slots:
        by_model.setdefault(s.model, []).append(s.index)
    router = Router(slots, by_model, Timeline(start_s=0.0))
    for s in slots:  # the situation's awake instances hold their memory from the start
        if s.awake:
            router.timeline.awake_from(s.index, 0.0, counted=False)
    before = {s.id: s.awake for s in slots}
    k, _ = router.route(models.index(model), 10.0)
    woken = [s.id for s in slots if s.awake and not before[s.id]]
    slept = [s.id for s in slots if before[s.id] and not s.awake]
    return slots[k].id, (woken[0] if woken else None), slept


@pytest.mark.parametrize("name", list(SITUATIONS))
def test_gateway_and_simulator_choose_alike(name, tmp_path):
    rows, model, expected = SITUATIONS[name]
    assert _gateway_choice(rows, model, tmp_path) == expected
    assert _router_choice(rows, model) == expected
