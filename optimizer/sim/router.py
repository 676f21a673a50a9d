"""Routing and tiering as the gateway does them: the choices are
`planner.optimizer.serving_rule`'s, the functions the gateway calls too.

A request for model m goes to the awake instance of m with the fewest outstanding requests
(ties: plan order). A waking instance counts as awake: requests that arrive during a wake
queue behind that single wake. If no instance of m is awake, one is woken
(`serving_rule.choose_wake`: the one whose wake displaces the fewest awake co-tenants, then the
fewest requests in flight on them; ties: plan order):

- the co-tenants it displaces (`serving_rule.displaced`: host/disk instances on its GPUs, as many
  as the GPU memory needs, those outside their awake hours first; every awake one where the
  point gives no GPU capacity) stop taking requests, finish what they hold, and sleep
  (`sleep_s`); the wake (`wake_host_s` for host tier, `wake_disk_s` for disk tier) starts
  when the last of them has slept;
- with `policy=serving_rule.LRU` the least recently used go first (the reactive-swapping baseline);
  with a `warm_budget_gib` too, the least recently used awake instances anywhere are put to
  sleep until the warm memory of the whole point (awake instances, plus the CUDA contexts of
  sleeping ones) stays within it (the memory-matched `lru@POINT` baseline: the router's
  own, the gateway has no budget).

Planned tiers (`Slot.hours`, `idle_timeout_s`): at the start of each hour a sleeping
instance wakes ahead of its requests when the hour is one of its awake hours
(`serving_rule.wakes_ahead`), and an awake host/disk instance with nothing to do sleeps
`idle_timeout_s` after its last request once outside its awake hours (`serving_rule.sleep_due_s`).
Hand-off (`handoff`, model -> models often asked next in a session): a request also wakes
a sleeping instance of each of those models that has none awake, where that puts nobody to
sleep (`serving_rule.wakes_on_handoff`), so the session's next call finds it awake.
Stand-ins (`substitutes`): a request that would wait goes to a ready instance of a stand-in
model when the model's rule says so (`serving_rule.substitute`); the wake still happens unless
the rule says not to.

No thrash (`planner.optimizer.swap`, a planned policy only, not a reactive one): a wake that displaces a co-tenant
woken less than `min_awake_s` ago begins no earlier than that, and no later than the
deadline of the request that asked for it (its model's switch SLO less the wake, or
`swap.MAX_WAIT_S`); until then the co-tenant keeps serving its model's requests (they
collate on it, as requests for the waking model collate on its wake).

A sleeping instance is woken again by the next request for its model, after the instance
that displaced it has drained in turn: the GPUs pass between models in arrival order.
`gpu`-tier instances never sleep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from planner.optimizer import serving_rule, swap
from planner.optimizer.sim.event import Timeline
from planner.optimizer.sim.instance import Engine
from planner.schemas.plan import SubstituteRule


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
    woke_s: float = -math.inf  # when its last wake completed (-inf: awake from the start)
    sleep_at_s: float = -math.inf  # a displacing wake's swap begins: serves until then
    cache: dict[int, int] = field(default_factory=dict)  # session -> epoch of its last call
    wakes: int = 0
    hours: frozenset[int] = frozenset()  # hours of the day it is kept awake (host/disk)
    variant: str = ""

    @property
    def lazy(self) -> bool:
        """host/disk tier: may be put to sleep (`serving_rule.Tenant`)."""
        return self.tier != "gpu"

    @property
    def awake_hours(self) -> frozenset[int]:
        """`serving_rule.Tenant`."""
        return self.hours


def _up(s: Slot) -> bool:
    return s.awake


def _woke_s(s: Slot) -> float:
    """When its current wake completed (`swap.swap_at_s`; -inf: awake from the start)."""
    return s.woke_s


class Router:
    """Chooses the instance of each request and moves instances between tiers."""

    # the simulation's slots and keyword-only policy options, one each
    def __init__(  # noqa: PLR0913
        self,
        slots: list[Slot],
        by_model: dict[int, list[int]],
        timeline: Timeline,
        *,
        policy: serving_rule.EvictionPolicy = serving_rule.PLAN,
        gpu_memory_gib: dict[tuple[str, int], float] | None = None,
        idle_timeout_s: float | None = None,
        warm_budget_gib: float | None = None,
        substitutes: dict[int, tuple[SubstituteRule, list[tuple[Slot, float]]]] | None = None,
        handoff: dict[int, list[int]] | None = None,
        switch_slo_s: dict[int, float | None] | None = None,
        min_awake_s: float = swap.MIN_AWAKE_S,
    ):
        self.slots = slots
        self.by_model = by_model
        self.timeline = timeline
        self.policy = policy
        self.capacity = gpu_memory_gib or {}
        self.idle_timeout_s = idle_timeout_s
        self.warm_budget_gib = warm_budget_gib  # GiB over all GPUs (a reactive policy only)
        # model -> (its rule, the stand-in slots with their quality penalty)
        self.substitutes = substitutes or {}
        self.handoff = handoff or {}  # model -> models woken with its requests
        # The no-thrash rule (`swap`, as the gateway's waker): a planned policy only, the
        # reactive baseline swaps at once.
        self.switch_slo_s = switch_slo_s or {}
        self.min_awake_s = 0.0 if policy.reactive else min_awake_s
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
        # A hand-off only wakes an instance that displaces nobody (fixed by the plan): models
        # with none are dropped from the lists up front.
        can = {
            m
            for m, cs in self.cands.items()
            if any(
                c.lazy
                and serving_rule.handoff_displaces_nobody(c, self.near[c.index], self.capacity)
                for c in cs
            )
        }
        self.handoff = {
            a: kept for a, bs in self.handoff.items() if (kept := [b for b in bs if b in can])
        }
        self.lazy = [s for s in slots if s.lazy]
        self.scheduled = [s for s in self.lazy if s.hours]  # woken ahead of their requests
        self.next_hour_s = math.inf  # next hour start the schedule acts on
        self.now_s = -math.inf  # time of the decision being made

    # -- start state --------------------------------------------------------------------------
    def start(self, t0: float) -> None:
        """Who is awake at the start: every gpu-tier instance, and host/disk instances in
        plan order as long as they displace nobody already awake."""
        self.now_s = t0
        for s in self.slots:
            s.awake = s.tier == "gpu"
        for s in self.slots:
            if s.tier != "gpu":
                s.awake = not self._conflicts(s)
            s.ready_s = t0
            s.engine.free_s = t0
            if s.awake:
                self.timeline.awake_from(s.index, t0, counted=False)
        if self.scheduled:
            self.next_hour_s = serving_rule.next_hour_s(t0)

    # -- routing ------------------------------------------------------------------------------
    def route(self, model: int, t: float) -> tuple[int, float, float]:
        """(slot index, time the request can enter its engine, quality penalty: -1 unless a
        stand-in serves it); slot -1: no instance. Then the hand-off wakes."""
        got = self._route(model, t)
        nxt = self.handoff.get(model)
        if nxt:
            self._hand_off(nxt, t)
        return got

    def _hand_off(self, models: list[int], t: float) -> None:
        """Wake a sleeping instance of each model in `models` that has none awake, the first
        in plan order that `serving_rule.wakes_on_handoff` lets wake."""
        idle_s = self.idle_timeout_s
        for m in models:
            cands = self.cands[m]
            # awake with no idle sleep that can be due yet: nothing to do (the common case)
            if any(
                c.awake and (idle_s is None or t <= max(c.last_used_s, c.ready_s) + idle_s)
                for c in cands
            ):
                continue
            for c in cands:
                self._settle(c, t)
            if any(c.awake for c in cands):
                continue
            near, cap = self.near, self.capacity
            s = next(
                (c for c in cands if serving_rule.wakes_on_handoff(c, near[c.index], cap)), None
            )
            if s is not None:
                self._wake(s, t)

    def _route(self, model: int, t: float) -> tuple[int, float, float]:
        if t >= self.next_hour_s:
            self._hours_until(t)
        self.now_s = t
        cands = self.cands.get(model)
        if not cands:
            return -1, t, -1.0
        idle_s = self.idle_timeout_s
        if idle_s is not None:
            for c in cands:  # `_settle`'s first test inline: this runs for every request
                if c.awake and t > c.last_used_s + idle_s and t > c.ready_s + idle_s:
                    self._settle(c, t)
        if len(cands) == 1:  # `serving_rule.route` of one instance, without its calls
            s = cands[0] if cands[0].awake else None
        else:
            s = serving_rule.route(cands, _up, lambda c: c.engine.outstanding(t))
        if s is not None and s.ready_s <= t:
            s.last_used_s = t
            return s.index, t, -1.0
        if s is None and self.min_awake_s > 0:
            # displaced by a wake whose swap has not begun: it serves until then (collated)
            s = next((c for c in cands if c.sleep_at_s > t), None)
            if s is not None:
                s.last_used_s = t
                return s.index, (s.ready_s if s.ready_s > t else t), -1.0
        return self._wake_or_stand_in(model, cands, s, t)

    def _wake_or_stand_in(
        self, model: int, cands: list[Slot], s: Slot | None, t: float
    ) -> tuple[int, float, float]:
        """A request that no ready instance takes: a stand-in model where its substitute
        rule finds one ready, else it waits for `s` (still waking) or for the instance
        woken for it."""
        sub = self.substitutes.get(model)
        if s is None:
            s = serving_rule.choose_wake(cands, self._conflicts, lambda c: c.engine.outstanding(t))
            if sub is None or sub[0].wake:
                self._wake(s, t)
        if sub is not None:
            wait_s = s.ready_s - t if s.awake else self._wait_estimate_s(s, t)
            got = self._stand_in(sub, wait_s, t)
            if got is not None:
                return got
            if not s.awake:  # no stand-in ready after all: the model wakes
                self._wake(s, t)
        s.last_used_s = t
        return s.index, (s.ready_s if s.ready_s > t else t), -1.0

    def _stand_in(
        self, sub: tuple[SubstituteRule, list[tuple[Slot, float]]], wait_s: float, t: float
    ) -> tuple[int, float, float] | None:
        rule, cands = sub
        if self.idle_timeout_s is not None:
            for c, _ in cands:
                self._settle(c, t)

        def ready(c: Slot) -> bool:
            return c.awake and c.ready_s <= t

        got = serving_rule.substitute(rule, wait_s, cands, ready, lambda c: c.engine.outstanding(t))
        if got is None:
            return None
        c, penalty = got
        c.last_used_s = t
        return c.index, t, penalty

    def _wait_estimate_s(self, s: Slot, t: float) -> float:
        """The wait a wake of `s` would cause, without waking it: its co-tenants' sleeps
        and its wake (their drains are not known before they happen)."""
        start = max(t, s.asleep_done_s)
        victims = self._conflicts(s)
        at = self._swap_at_s(s, victims, t)
        for c in victims:
            start = max(start, max(c.engine.free_s, c.ready_s, at) + c.sleep_s)
        return start + s.wake_s - t

    def _swap_at_s(self, s: Slot, victims: list[Slot], t: float) -> float:
        """When the wake of `s` for a request at `t` may put `victims` to sleep
        (`swap.swap_at_s`: a victim woken less than `min_awake_s` ago keeps its memory
        until the request's deadline)."""
        if not victims or self.min_awake_s <= 0:
            return t
        deadline = swap.swap_deadline_s(t, s.wake_s, self.switch_slo_s.get(s.model))
        return swap.swap_at_s(
            victims, now_s=t, deadline_s=deadline, woke_s=_woke_s, min_awake_s=self.min_awake_s
        )

    def _settle(self, s: Slot, t: float) -> None:
        """Put `s` to sleep at the time its idle timeout ran out, if that is before `t`."""
        if self.idle_timeout_s is None or not s.awake or s.tier == "gpu":
            return
        # Idle since its last request or its wake at the earliest: nothing due before.
        if t <= max(s.last_used_s, s.ready_s) + self.idle_timeout_s:
            return
        if s.engine.outstanding(t):
            return
        idle_since = max(s.engine.free_s, s.ready_s)
        at = serving_rule.sleep_due_s(s, idle_since, self.idle_timeout_s)
        if at < t:
            self._sleep(s, at)

    def _hours_until(self, t: float) -> None:
        """Wake, at the start of each hour up to `t`, the sleeping instances whose awake
        hours begin (the instances' idle sleeps before it first)."""
        while self.next_hour_s <= t:
            tb = self.next_hour_s
            self.now_s = tb
            for s in self.lazy:
                self._settle(s, tb)
            for s in self.scheduled:
                if s.awake or not serving_rule.in_hours(s, tb):
                    continue
                victims = self._conflicts(s)
                if serving_rule.wakes_ahead(
                    s, victims, lambda c, t=tb: c.engine.outstanding(t), tb
                ):
                    self._wake(s, tb)
            self.next_hour_s = tb + serving_rule.HOUR_S

    def settle_until(self, end_s: float) -> None:
        """The end of the trace: the hour starts and idle sleeps due before `end_s`."""
        if end_s >= self.next_hour_s:
            self._hours_until(end_s)
        for s in self.lazy:
            self._settle(s, end_s)

    # -- tier changes -------------------------------------------------------------------------
    def _sleep(self, s: Slot, at_s: float) -> None:
        s.awake = False
        s.asleep_done_s = at_s + s.sleep_s
        self.timeline.asleep_from(s.index, s.asleep_done_s)

    def _wake(self, s: Slot, t: float) -> None:
        if self.idle_timeout_s is not None:  # co-tenants idle past the timeout slept already
            for j in self.overlaps[s.index]:
                self._settle(self.slots[j], t)
        start = max(t, s.asleep_done_s)
        victims = self._conflicts(s)
        at = self._swap_at_s(s, victims, t)
        for c in victims:
            drained = max(c.engine.drain(), c.ready_s, at)  # finishes what it holds
            c.sleep_at_s = at
            self._sleep(c, drained)
            start = max(start, c.asleep_done_s)
        s.awake = True
        s.epoch += 1
        s.wakes += 1
        s.ready_s = start + s.wake_s
        s.woke_s = s.ready_s
        s.engine.free_s = max(s.engine.free_s, s.ready_s)
        self.timeline.awake_from(s.index, start)

    def _conflicts(self, s: Slot) -> list[Slot]:
        """Awake co-tenants that must sleep before `s` can be awake (at `now_s`)."""
        out = serving_rule.displaced(
            s, self.near[s.index], policy=self.policy, capacity_gib=self.capacity, t_s=self.now_s
        )
        if self.policy.reactive and self.warm_budget_gib is not None:
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
