"""Routing and tiering as the gateway does them: the choices are `planner.optimizer.tiering`'s,
the functions the gateway calls too.

A request for model m goes to the awake instance of m with the fewest outstanding requests
(ties: plan order). A waking instance counts as awake: requests that arrive during a wake
queue behind that single wake. If no instance of m is awake, one is woken
(`tiering.choose_wake`: the one whose wake displaces the fewest awake co-tenants, then the
fewest requests in flight on them; ties: plan order):

- its co-tenants (host/disk instances on any of its GPUs, `policy="plan"`) stop taking
  requests, finish what they hold, and sleep (`sleep_s`); the wake (`wake_host_s` for host
  tier, `wake_disk_s` for disk tier) starts when the last of them has slept;
- with `policy="lru"` only as many awake co-tenants are put to sleep as the GPU memory
  needs, least recently used first (the reactive-swapping baseline); with a
  `warm_budget_gib` too, the least recently used awake instances anywhere are put to
  sleep until the warm memory of the whole point (awake instances, plus the CUDA
  contexts of sleeping ones) stays within it (the memory-matched `lru@POINT` baseline:
  the router's own, the gateway has no budget).

A sleeping instance is woken again by the next request for its model, after the instance
that displaced it has drained in turn: the GPUs pass between models in arrival order.
`gpu`-tier instances never sleep. With `idle_timeout_s`, an awake host/disk instance that
has had nothing to do for that long goes to sleep by itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from planner.optimizer import tiering
from planner.optimizer.sim.event import Timeline
from planner.optimizer.sim.instance import Engine


@dataclass
class Slot:
    """One instance of the point: static facts and its tier state."""

    index: int
    id: str
    model: int  # model index, -1: a model absent from the trace
    tier: str  # gpu | host | disk
    gpus: tuple[tuple[str, int], ...]  # (node, device index)
    awake_gib: float  # per GPU, awake
    context_gib: float  # per GPU, asleep
    wake_s: float
    sleep_s: float
    engine_delay_s: float  # per-request front-end cost before the engine sees it, s
    engine: Engine
    offload_tokens: float = 0.0  # prefix tokens the CPU KV tier keeps across sleeps
    h2d_s_per_token: float = 0.0  # time to bring one token's KV back from host RAM, s
    awake: bool = True  # holds its awake memory (possibly still waking)
    ready_s: float = -math.inf  # when the current wake completes
    asleep_done_s: float = -math.inf  # when its last sleep completed
    epoch: int = 0  # wakes so far: prefix caches survive only within one epoch
    last_used_s: float = -math.inf
    cache: dict[int, int] = field(default_factory=dict)  # session -> epoch of its last call
    wakes: int = 0

    @property
    def lazy(self) -> bool:
        """host/disk tier: may be put to sleep (`tiering.Tenant`)."""
        return self.tier != "gpu"


def _up(s: Slot) -> bool:
    return s.awake


class Router:
    """Chooses the instance of each request and moves instances between tiers."""

    def __init__(
        self,
        slots: list[Slot],
        by_model: dict[int, list[int]],
        timeline: Timeline,
        *,
        policy: str = "plan",
        gpu_memory_gib: dict[tuple[str, int], float] | None = None,
        idle_timeout_s: float | None = None,
        warm_budget_gib: float | None = None,
    ):
        self.slots = slots
        self.by_model = by_model
        self.timeline = timeline
        self.policy = policy
        self.capacity = gpu_memory_gib or {}
        self.idle_timeout_s = idle_timeout_s
        self.warm_budget_gib = warm_budget_gib  # GiB over all GPUs (policy "lru" only)
        self.on_gpu: dict[tuple[str, int], list[int]] = {}
        for s in slots:
            for g in s.gpus:
                self.on_gpu.setdefault(g, []).append(s.index)
        # Instances sharing a GPU (plan order), and the host/disk ones a wake may displace.
        self.near: dict[int, list[Slot]] = {}
        self.overlaps: dict[int, list[int]] = {}
        for s in slots:
            near = sorted({j for g in s.gpus for j in self.on_gpu[g]} - {s.index})
            self.near[s.index] = [slots[j] for j in near]
            self.overlaps[s.index] = [j for j in near if slots[j].tier != "gpu"]
        self.cands: dict[int, list[Slot]] = {m: [slots[i] for i in c] for m, c in by_model.items()}

    # -- start state --------------------------------------------------------------------------
    def start(self, t0: float) -> None:
        """Who is awake at the start: every gpu-tier instance, and host/disk instances in
        plan order as long as they displace nobody already awake."""
        for s in self.slots:
            s.awake = s.tier == "gpu"
        for s in self.slots:
            if s.tier != "gpu":
                s.awake = not self._conflicts(s)
            s.ready_s = t0
            s.engine.free_s = t0
            if s.awake:
                self.timeline.awake_from(s.index, t0, counted=False)

    # -- routing ------------------------------------------------------------------------------
    def route(self, model: int, t: float) -> tuple[int, float]:
        """(slot index, time the request can enter its engine); slot -1: no instance."""
        cands = self.cands.get(model)
        if not cands:
            return -1, t
        if self.idle_timeout_s is not None:
            for c in cands:
                if c.awake and c.tier != "gpu":
                    self._maybe_idle_sleep(c, t)

        def load(c: Slot) -> int:
            return c.engine.outstanding(t)

        s = tiering.route(cands, _up, load)
        if s is None:
            s = tiering.choose_wake(cands, self._conflicts, load)
            self._wake(s, t)
        s.last_used_s = t
        return s.index, (s.ready_s if s.ready_s > t else t)

    def _maybe_idle_sleep(self, s: Slot, t: float) -> None:
        assert self.idle_timeout_s is not None
        if s.engine.outstanding(t):
            return
        idle_since = max(s.engine.free_s, s.ready_s)
        if idle_since + self.idle_timeout_s < t:
            self._sleep(s, idle_since + self.idle_timeout_s)

    # -- tier changes -------------------------------------------------------------------------
    def _sleep(self, s: Slot, at_s: float) -> None:
        s.awake = False
        s.asleep_done_s = at_s + s.sleep_s
        self.timeline.asleep_from(s.index, s.asleep_done_s)

    def _wake(self, s: Slot, t: float) -> None:
        if self.idle_timeout_s is not None:  # co-tenants idle past the timeout slept already
            for j in self.overlaps[s.index]:
                if self.slots[j].awake:
                    self._maybe_idle_sleep(self.slots[j], t)
        start = max(t, s.asleep_done_s)
        for c in self._conflicts(s):
            drained = max(c.engine.drain(), c.ready_s, t)  # finishes what it holds
            self._sleep(c, drained)
            start = max(start, c.asleep_done_s)
        s.awake = True
        s.epoch += 1
        s.wakes += 1
        s.ready_s = start + s.wake_s
        s.engine.free_s = max(s.engine.free_s, s.ready_s)
        self.timeline.awake_from(s.index, start)

    def _conflicts(self, s: Slot) -> list[Slot]:
        """Awake co-tenants that must sleep before `s` can be awake."""
        out = tiering.displaced(
            s, self.near[s.index], policy=self.policy, capacity_gib=self.capacity
        )
        if self.policy == "lru" and self.warm_budget_gib is not None:
            out = self._budget_victims(s, out)
        return out

    def _budget_victims(self, s: Slot, out: list[Slot]) -> list[Slot]:
        """`out` and the least recently used awake lazy instances (anywhere) until the
        point's warm memory with `s` awake fits the budget (plan order). A wake that cannot
        fit even with every other instance asleep goes ahead (the budget is then exceeded,
        not the trace left unserved)."""
        assert self.warm_budget_gib is not None
        slots = self.slots
        chosen = {o.index for o in out}

        def extra(o: Slot) -> float:  # GiB an awake instance holds beyond its context
            return (o.awake_gib - (o.context_gib if o.tier != "gpu" else 0.0)) * len(o.gpus)

        warm = extra(s) + sum(o.context_gib * len(o.gpus) for o in slots if o.tier != "gpu")
        warm += sum(
            extra(o) for o in slots if o.awake and o.index != s.index and o.index not in chosen
        )
        if warm > self.warm_budget_gib + 1e-9:
            for o in sorted(
                (o for o in slots if o.awake and o.tier != "gpu" and o.index != s.index),
                key=lambda o: (o.last_used_s, o.index),
            ):
                if o.index in chosen:
                    continue
                chosen.add(o.index)
                warm -= extra(o)
                if warm <= self.warm_budget_gib + 1e-9:
                    break
        return [o for o in slots if o.index in chosen]
