"""The tiering rule: which instance serves a request, which sleeping one wakes, whom a wake
puts to sleep.

One rule for the gateway (adjuster/gateway/) and the simulator's router
(optimizer/sim/router.py), which models the gateway: both call these functions on their own
instance objects (anything with the `Tenant` attributes), so the plan is scored by the rule
that later serves it. It lives in the optimizer because `optimizer/` may import only
`planner` (docs/architecture.md), while `adjuster/` may import the optimizer. Pure: no clock,
no I/O.

- `route`: among the instances of the requested model that are up, the one with the fewest
  requests outstanding (ties: plan order); None when none is up.
- `choose_wake`: among the model's instances, a live one before a failed one, then the one
  whose wake puts the fewest awake co-tenants to sleep, then the one whose displaced
  co-tenants hold the fewest requests in flight (ties: plan order).
- `displaced`: the co-tenants a wake puts to sleep. Policy `plan` (the gateway's): every
  awake host/disk-tier instance sharing a GPU with the host/disk-tier one that wakes (the
  plan's memory invariant leaves room for every gpu-tier instance plus exactly one lazy one
  per GPU, so a gpu-tier instance coming back, e.g. after a crash, displaces nobody); `lru`
  (the reactive-swapping baseline): only as many as the GPU memory needs, least recently
  used first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

Gpu = tuple[str, int]  # (node, device index)


class Tenant(Protocol):
    """An instance as the tiering rule sees it."""

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


T = TypeVar("T", bound=Tenant)


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
    policy: str = "plan",
    capacity_gib: Mapping[Gpu, float] | None = None,
) -> list[T]:
    """The co-tenants that go to sleep before `target` wakes (plan order).

    `near`: every other instance sharing a GPU with `target`, in plan order, any tier,
    awake or not. `capacity_gib` ((node, device) -> GiB) is read by policy `lru` only.
    """
    if not target.lazy:  # the plan keeps room for every gpu-tier instance beside one lazy one
        return []
    awake = [c for c in near if c.awake and c.lazy]
    if policy != "lru" or not awake:
        return awake
    cap = capacity_gib or {}
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
            key=lambda k: (on_g[k].last_used_s, k),
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


__all__ = ["Tenant", "choose_wake", "displaced", "route"]
