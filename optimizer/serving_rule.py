"""The serving rule: which instance serves a request, which sleeping one wakes, whom a wake
puts to sleep, when a lazy instance wakes ahead of its requests or sleeps, and when an awake
stand-in answers instead.

One rule for the gateway (adjuster/gateway/) and the simulator's router
(optimizer/sim/router.py), which models the gateway: both call these functions on their own
instance objects (anything with the `Tenant` attributes), so the plan is scored by the rule
that later serves it. It lives in the optimizer because `optimizer/` may import only
`planner` (docs/architecture.md), while `adjuster/` may import the optimizer. Pure: no clock,
no I/O; times are seconds whose hour of day is `t mod 86400 // 3600` (the trace's time base,
UTC epoch seconds at the gateway).

- `route`: among the instances of the requested model that are up, the one with the fewest
  requests outstanding (ties: plan order); None when none is up.
- `choose_wake`: among the model's instances, a live one before a failed one, then the one
  whose wake puts the fewest awake co-tenants to sleep, then the one whose displaced
  co-tenants hold the fewest requests in flight (ties: plan order).
- `displaced`: the co-tenants a wake puts to sleep: only as many awake host/disk-tier ones as
  the GPU memory needs (`capacity_gib`, the point's `gpu_usable_gib`), in the order of an
  eviction policy (`EvictionPolicy`): `PLAN` (the gateway's) takes first those outside their
  awake hours (the plan's forecast says they are not needed now), then the least recently
  used; `LRU` (the reactive-swapping baseline) the least recently used. Under `PLAN` a GPU
  whose capacity the point does not give holds one lazy instance awake at a time (the plan's
  memory invariant: every gpu-tier instance plus exactly one lazy one), so there a wake puts
  every awake lazy co-tenant to sleep. A gpu-tier instance coming back (after a crash)
  displaces nobody.
- `wakes_ahead`: a sleeping lazy instance wakes without a request at the start of each of its
  awake hours, unless that would put to sleep a co-tenant within its own awake hours or one
  with requests in flight.
- `wakes_on_handoff`: a request for model A also wakes a sleeping lazy instance of each model
  of the point's `handoff[A]` (models that often come next in an agent session), ahead of
  its request, when no instance of that model is awake and each of its GPUs holds every
  instance on it awake at once, or has no other host/disk instance (the early wake puts
  nobody to sleep, now or at a later wake).
- `sleep_due_s`: an awake lazy instance with nothing to do sleeps `idle_sleep_s` after its
  last request, once outside its awake hours.
- `substitute`: a request whose model would make it wait goes to the least loaded ready
  stand-in (ties: declared order) when the rule says so: any wait (`always_while_waking`)
  or a predicted wait beyond the model's switch SLO (`wake_exceeds_slo`); a stand-in that
  the model's wake puts to sleep (a co-tenant) does not answer.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from planner.schemas.plan import SubstituteRule

Gpu = tuple[str, int]  # (node, device index)
HOUR_S = 3600.0
DAY_H = 24


class Tenant(Protocol):
    """An instance as the serving rule sees it."""

    @property
    def awake(self) -> bool:
        """Holds its awake memory (awake, or waking)."""
        ...

    @property
    def lazy(self) -> bool:
        """host/disk tier: may be put to sleep."""
        ...

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        """The GPUs it occupies."""
        ...

    @property
    def awake_gib(self) -> float:
        """Memory per GPU when awake, GiB."""
        ...

    @property
    def context_gib(self) -> float:
        """Memory per GPU while asleep (CUDA context), GiB."""
        ...

    @property
    def last_used_s(self) -> float:
        """When it last took a request (the LRU order), s."""
        ...

    @property
    def awake_hours(self) -> Collection[int]:
        """Hours of the day it is kept awake (lazy instances; empty: none)."""
        ...


T = TypeVar("T", bound=Tenant)


def hour_of_day(t_s: float) -> int:
    """Hour of the day (0-23) of a time in the trace's time base."""
    return int(t_s // HOUR_S) % DAY_H


def next_hour_s(t_s: float) -> float:
    """The start of the hour after the one `t_s` is in."""
    return (math.floor(t_s / HOUR_S) + 1) * HOUR_S


def in_hours(c: Tenant, t_s: float) -> bool:
    """`c` is within its awake hours at `t_s`."""
    return bool(c.awake_hours) and hour_of_day(t_s) in c.awake_hours


@dataclass(frozen=True)
class EvictionPolicy:
    """Whom a wake puts to sleep first, and what the policy implies beyond that order.

    A new policy is a subclass overriding `victim_key` (and a line in `EVICTION_POLICIES`).
    Frozen values: they compare equal across processes (the simulator runs in workers)."""

    name: str
    # No plan behind it: it swaps on demand only, so no no-thrash hold (`swap`) and a cap on
    # the point's warm memory may apply (the `lru@` twin); a GPU the point gives no capacity
    # holds as many awake as its memory (no one-lazy-instance invariant).
    reactive: bool

    def victim_key(self, c: Tenant, t_s: float) -> tuple[float, ...]:
        """Sort key of a co-tenant among those a wake may put to sleep (smaller: first)."""
        return (c.last_used_s,)


@dataclass(frozen=True)
class PlanEviction(EvictionPolicy):
    """The gateway's: co-tenants outside their awake hours first, then least recently used."""

    name: str = "plan"
    reactive: bool = False

    def victim_key(self, c: Tenant, t_s: float) -> tuple[float, ...]:
        return (in_hours(c, t_s), c.last_used_s)


@dataclass(frozen=True)
class LruEviction(EvictionPolicy):
    """Reactive swapping (the `lru` baselines): the least recently used first."""

    name: str = "lru"
    reactive: bool = True


PLAN = PlanEviction()
LRU = LruEviction()
EVICTION_POLICIES: dict[str, EvictionPolicy] = {p.name: p for p in (PLAN, LRU)}


def eviction_policy(policy: str | EvictionPolicy) -> EvictionPolicy:
    """The policy object of a name (an object passes through); ValueError for an unknown one."""
    if isinstance(policy, EvictionPolicy):
        return policy
    try:
        return EVICTION_POLICIES[policy]
    except KeyError:
        raise ValueError(
            f"policy must be one of {tuple(EVICTION_POLICIES)}, not {policy!r}"
        ) from None


def route(cands: Sequence[T], up: Callable[[T], bool], load: Callable[[T], int]) -> T | None:
    """The instance a request goes to: of those `up`, the fewest `load` (ties: first).

    `load` is asked only when two or more instances are up.
    """
    best: T | None = None
    best_load = -1
    for c in cands:
        if not up(c):
            continue
        if best is None:
            best = c
            continue
        if best_load < 0:
            best_load = load(best)
        n = load(c)
        if n < best_load:
            best, best_load = c, n
    return best


def displaced(
    target: T,
    near: Sequence[T],
    *,
    policy: EvictionPolicy = PLAN,
    capacity_gib: Mapping[Gpu, float] | None = None,
    t_s: float = 0.0,
) -> list[T]:
    """The co-tenants that go to sleep before `target` wakes (plan order).

    `near`: every other instance sharing a GPU with `target`, in plan order, any tier,
    awake or not. `capacity_gib`: (node, device) -> GiB the instances on it may hold.
    `t_s`: now (`PLAN` spares co-tenants within their awake hours).
    """
    if not target.lazy:  # the plan keeps room for every gpu-tier instance beside one lazy one
        return []
    awake = [c for c in near if c.awake and c.lazy]
    if not awake:
        return awake
    cap = capacity_gib or {}
    if not policy.reactive and not all(g in cap for g in target.gpus):
        return awake  # one lazy instance awake per GPU (the memory invariant)
    lazy_awake = {id(c) for c in awake}
    out: set[int] = set()  # ids: instances need not be hashable or comparable
    for g in target.gpus:
        limit = cap.get(g, math.inf)
        on_g = [c for c in near if g in c.gpus]
        used = target.awake_gib + sum(  # GiB on g once target is awake
            c.awake_gib if (c.awake and id(c) not in out) else c.context_gib for c in on_g
        )
        victims = sorted(
            (k for k, c in enumerate(on_g) if id(c) in lazy_awake and id(c) not in out),
            key=lambda k: (*policy.victim_key(on_g[k], t_s), k),
        )
        for k in victims:
            if used <= limit + 1e-9:
                break
            c = on_g[k]
            out.add(id(c))
            used -= c.awake_gib - c.context_gib  # GiB freed by its sleep
    return [c for c in near if id(c) in out]


def choose_wake(
    cands: Sequence[T],
    displaces: Callable[[T], Sequence[T]],
    load: Callable[[T], int],
    failed: Callable[[T], bool] = lambda c: False,
) -> T:
    """Which of a model's instances to wake (see the module docstring)."""

    def key(k: int) -> tuple[bool, int, int, int]:
        c = cands[k]
        out = displaces(c)
        return (failed(c), len(out), sum(load(d) for d in out), k)

    return cands[min(range(len(cands)), key=key)]


def wakes_ahead(c: T, victims: Sequence[T], load: Callable[[T], int], t_s: float) -> bool:
    """A sleeping lazy instance wakes now, ahead of its requests: within its awake hours, and
    putting to sleep (`victims`, from `displaced`) none within its own or with work."""
    if c.awake or not c.lazy or not in_hours(c, t_s):
        return False
    return not any(in_hours(v, t_s) or load(v) > 0 for v in victims)


def wakes_on_handoff(c: T, near: Sequence[T], capacity_gib: Mapping[Gpu, float]) -> bool:
    """A sleeping lazy instance of a model that often follows the requested one wakes now,
    ahead of its request, only where it displaces nobody, now or later
    (`handoff_displaces_nobody`). It costs its own warm memory only."""
    return not c.awake and c.lazy and handoff_displaces_nobody(c, near, capacity_gib)


def handoff_displaces_nobody(
    c: Tenant, near: Sequence[Tenant], capacity_gib: Mapping[Gpu, float]
) -> bool:
    """Each GPU of `c` holds it awake beside every other instance on it awake (`near`: those
    instances; `capacity_gib` as in `displaced`, GPUs it lacks hold one lazy instance awake
    at a time), or has no lazy co-tenant: an early wake of `c` then puts nobody to sleep
    now, and makes no other model's later wake put it to sleep first (fixed by the plan)."""
    for g in c.gpus:
        on_g = [o for o in near if g in o.gpus]
        if any(o.lazy for o in on_g) and (
            g not in capacity_gib
            or c.awake_gib + sum(o.awake_gib for o in on_g) > capacity_gib[g] + 1e-9
        ):
            return False
    return True


def sleep_due_s(c: Tenant, idle_since_s: float, idle_sleep_s: float | None) -> float:
    """When an awake lazy instance with nothing to do since `idle_since_s` goes to sleep: the
    first moment `idle_sleep_s` or more later outside its awake hours (inf: never)."""
    if idle_sleep_s is None or not c.lazy:
        return math.inf
    t = idle_since_s + idle_sleep_s
    hours = c.awake_hours
    if not hours:
        return t
    h = hour_of_day(t)
    if h not in hours:
        return t
    return math.floor(t / HOUR_S) * HOUR_S + _off_delay_s(frozenset(hours))[h]


@functools.lru_cache(maxsize=256)
def _off_delay_s(hours: frozenset[int]) -> tuple[float, ...]:
    """Per hour of the day: seconds from its start to the next hour outside `hours` (inf when
    every hour is inside)."""
    if len(hours) >= DAY_H:
        return (math.inf,) * DAY_H
    out = []
    for h in range(DAY_H):
        k = 0
        while (h + k) % DAY_H in hours:
            k += 1
        out.append(k * HOUR_S)
    return tuple(out)


def stand_ins(
    rule: SubstituteRule,
    instances_of: Callable[[str], Sequence[T]],
    variant_of: Callable[[T], str],
) -> list[tuple[T, float]]:
    """The instances that may answer under `rule`, with their quality penalty (declared
    order; a stand-in that names a variant: only instances running it)."""
    out: list[tuple[T, float]] = []
    for sub in rule.to:
        for c in instances_of(sub.model):
            if sub.variant is None or variant_of(c) == sub.variant:
                out.append((c, sub.quality_penalty))
    return out


def substitute(
    rule: SubstituteRule | None,
    wait_s: float,
    cands: Sequence[tuple[T, float]],
    ready: Callable[[T], bool],
    load: Callable[[T], int],
    victims: Sequence[T] = (),
) -> tuple[T, float] | None:
    """The stand-in (and its quality penalty) that answers a request its own model would make
    wait `wait_s`; None: the request waits (no rule, no need, or no stand-in ready).
    `victims`: whom the model's wake puts to sleep (`displaced`; none when the rule does not
    wake it): they are going to sleep, so they do not stand in."""
    if rule is None or wait_s <= 0:
        return None
    if rule.when == "wake_exceeds_slo" and (rule.max_wait_s is None or wait_s <= rule.max_wait_s):
        return None
    going = {id(v) for v in victims} if rule.wake else set()
    best = route([c for c, _ in cands if id(c) not in going], ready, load)
    if best is None:
        return None
    return next((c, p) for c, p in cands if c is best)


__all__ = [
    "EVICTION_POLICIES",
    "HOUR_S",
    "LRU",
    "PLAN",
    "EvictionPolicy",
    "LruEviction",
    "PlanEviction",
    "Tenant",
    "choose_wake",
    "displaced",
    "eviction_policy",
    "handoff_displaces_nobody",
    "hour_of_day",
    "in_hours",
    "next_hour_s",
    "route",
    "sleep_due_s",
    "stand_ins",
    "substitute",
    "wakes_ahead",
    "wakes_on_handoff",
]
