"""What the gateway tracks of the point's instances: status, load, admission.

Admission (`planner.optimizer.admission`, the simulator's bound too): an awake instance
takes at most `limit` requests at once (its `max_num_seqs` times
`GatewayConfig.admit_factor`: the engine's batch full plus a short queue inside the engine). Beyond that, requests wait in the gateway, first come first served, and a finished
request hands its slot straight to the oldest waiter of its model.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.adjuster.backends.base import Handle, Status
from planner.adjuster.gateway.clock import SYSTEM
from planner.optimizer import admission
from planner.schemas.plan import Instance, Point


def overlaps(a: Instance, b: Instance) -> bool:
    """Whether two instances share a GPU: same node and intersecting device lists."""
    return a.node == b.node and bool(set(a.gpus) & set(b.gpus))


@dataclass(eq=False)
class Inst:
    """One instance of the point as the gateway sees it (a `serving_rule.Tenant`)."""

    spec: Instance
    _status: Status
    _handle: Handle | None
    limit: int = 1  # requests it takes at once (admission bound)
    epoch: int = 0  # bumped on every status change: stale controller reads are dropped
    outstanding: int = 0
    draining: bool = False
    want_awake: bool = False  # tier gpu, or woken by the gateway: the health loop keeps it up
    failures: int = 0  # deaths and failed restarts since the last healthy probe
    timeouts: int = 0  # consecutive /health timeouts
    next_restart_at: float = 0.0
    last_used_s: float = -math.inf
    idle_since_s: float = -math.inf  # clock time its last request ended or its wake did
    woke_s: float = -math.inf  # Clock.mono_s() its last wake completed (-inf: awake at start)
    url: str = ""  # http://host:port of the handle ("" without one)
    addr: tuple[str, int] = ("", 0)  # (host, port) of the handle
    # what every upstream request carries: the instance's API key (never a client's)
    auth_headers: dict[str, str] = field(default_factory=dict)
    auth_items: tuple[tuple[str, str], ...] = ()  # the same, as http1.render_head takes them
    post_headers: dict[str, str] = field(default_factory=dict)  # a proxied POST's
    # woken when no request is left on it (`Pool.until_idle`); an Event set and cleared on
    # every request costs calls on the hot path, a list looked at only when it ends does not
    idle_waiters: list[asyncio.Future] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return self._status

    @status.setter
    def status(self, value: Status) -> None:
        self._status = value
        self.epoch += 1

    def __post_init__(self) -> None:
        self.handle = self._handle

    @property
    def handle(self) -> Handle | None:
        return self._handle

    @handle.setter
    def handle(self, value: Handle | None) -> None:
        # the URL and headers are made here once, not on every request
        self._handle = value
        self.url = f"http://{value.host}:{value.port}" if value is not None else ""
        self.addr = (value.host, value.port) if value is not None else ("", 0)
        self.auth_headers = value.auth_headers() if value is not None else {}
        self.auth_items = tuple(self.auth_headers.items())
        self.post_headers = {"Content-Type": "application/json", **self.auth_headers}

    @property
    def awake(self) -> bool:
        return self._status == "awake"

    @property
    def lazy(self) -> bool:
        return self.spec.tier != "gpu"

    @property
    def gpus(self) -> tuple[tuple[str, int], ...]:
        return tuple((self.spec.node, g) for g in self.spec.gpus)

    @property
    def awake_gib(self) -> float:
        return self.spec.memory_gib.total

    @property
    def context_gib(self) -> float:
        return self.spec.memory_gib.asleep

    @property
    def awake_hours(self) -> list[int]:
        return self.spec.awake_hours

    def routable(self) -> bool:
        return self._status == "awake" and self._handle is not None and not self.draining


def load(inst: Inst) -> int:
    """Requests in flight on an instance (the routing and wake tie-breaks)."""
    return inst.outstanding


def failed(inst: Inst) -> bool:
    return inst.status == "failed"


class Pool:
    """The instances of the point in force, by id and by model, and their admission queues."""

    def __init__(
        self, point: Point, admit_factor: float, clock: Callable[[], float] = SYSTEM.now_s
    ):
        self.admit_factor = admit_factor
        self.clock = clock  # epoch seconds: the hour of day of the plan's awake hours
        self.point = point
        self.instances: dict[str, Inst] = {}
        self.by_model: dict[str, list[Inst]] = defaultdict(list)
        self.waiting: dict[str, int] = defaultdict(int)  # requests queued, per model
        self._admit: dict[str, deque[asyncio.Future]] = defaultdict(deque)
        self.set_point(point)

    def set_point(self, point: Point) -> None:
        """Route by `point`: instances kept by id take the new spec (tier), others come or go."""
        self.point = point
        # (node, device) -> GiB the point may fill: co-tenants awake together up to it
        self.capacity = {
            (node, d): gib for node, devs in point.gpu_usable_gib.items() for d, gib in devs.items()
        }
        old, self.instances = self.instances, {}
        self.by_model = defaultdict(list)
        for spec in point.instances:
            inst = old.get(spec.id)
            if inst is None:
                inst = Inst(spec=spec, _status="stopped", _handle=None)
            else:
                inst.spec = spec
                inst.want_awake = spec.tier == "gpu" or inst.status == "awake"
            inst.limit = admission.instance_limit(spec.engine.max_num_seqs, self.admit_factor)
            self.instances[spec.id] = inst
            self.by_model[spec.model].append(inst)

    def near(self, inst: Inst) -> list[Inst]:
        """The other instances sharing a GPU with `inst` (plan order)."""
        return [c for c in self.instances.values() if c is not inst and overlaps(c.spec, inst.spec)]

    # ----- admission

    def take(self, inst: Inst) -> None:
        """Count one more request on `inst`."""
        inst.outstanding += 1

    def release(self, inst: Inst) -> None:
        """One request on `inst` is done: its slot goes to the oldest waiter of its model."""
        q = self._admit.get(inst.spec.model)
        while q:
            fut = q.popleft()
            if not fut.done():  # a waiter whose client left is skipped
                fut.set_result(inst)  # the slot passes on: outstanding stays
                return
        inst.outstanding -= 1
        if inst.outstanding == 0:
            inst.idle_since_s = self.clock()
            if inst.idle_waiters:
                for fut in inst.idle_waiters:
                    if not fut.done():
                        fut.set_result(None)
                inst.idle_waiters.clear()

    async def until_idle(self, inst: Inst) -> None:
        """Until no request is left on `inst`."""
        if inst.outstanding == 0:
            return
        fut = asyncio.get_running_loop().create_future()
        inst.idle_waiters.append(fut)
        await fut

    def queued_for_admission(self, model: str) -> bool:
        """Whether requests of `model` already wait for a slot (newcomers queue behind)."""
        q = self._admit.get(model)
        return bool(q) and any(not f.done() for f in q)  # per request: mostly no queue at all

    async def wait_slot(self, model: str) -> Inst | None:
        """Wait for a slot on one of the model's instances: the instance whose slot was handed
        over, or None when the instances changed (look again)."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._admit[model].append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            got = fut.result() if fut.done() and not fut.cancelled() else None
            if got is not None:  # handed a slot just as the client left: pass it on
                self.release(got)
            raise

    def wake_all_waiters(self) -> None:
        """Tell every waiter to look again."""
        for model in list(self._admit):
            self.wake_waiters(model)

    def wake_waiters(self, model: str) -> None:
        """Tell the waiters of `model` to look again (an instance came or went)."""
        q = self._admit.pop(model, None)
        for fut in q or ():
            if not fut.done():
                fut.set_result(None)
