"""The no-thrash rule: when a wake that puts awake co-tenants to sleep may begin.

One rule for the gateway (adjuster/gateway/waker.py) and the simulator's router
(optimizer/sim/router.py), as `serving_rule` is shared: a plan is scored as it is served. Pure.

- A wake waits while a co-tenant it displaces is busy (requests in flight or queued for it:
  the awake model's queue drains first) or was woken less than `min_awake_s` ago; requests
  for the waking model meanwhile collate behind that one wake.
- Neither holds past the deadline of the oldest waiting request (`swap_deadline_s`): its
  switch SLO less the expected wake time, or `max_wait_s` where it has none. Nobody starves,
  and a waiting request's SLO takes the memory of a model woken moments ago.
- A busy co-tenant is still never put to sleep with requests in flight: past the deadline
  it stops taking new ones and finishes those it holds first (the gateway's drain, the
  simulator's `engine.drain`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

MIN_AWAKE_S = 10.0  # a woken model stays awake at least this long (unless a deadline says)
MAX_WAIT_S = 10.0  # longest a request with no switch SLO waits for a swap to begin


def swap_deadline_s(
    arrival_s: float, wake_s: float, switch_slo_s: float | None, max_wait_s: float = MAX_WAIT_S
) -> float:
    """The latest a swap for a request that arrived at `arrival_s` may begin: in time for a
    wake of `wake_s` to meet its switch SLO, and never later than `max_wait_s`."""
    budget = max_wait_s
    if switch_slo_s is not None:
        budget = min(budget, max(switch_slo_s - wake_s, 0.0))
    return arrival_s + budget


def swap_at_s(
    victims: Sequence[T],
    *,
    now_s: float,
    deadline_s: float,
    woke_s: Callable[[T], float],
    busy: Callable[[T], bool] = lambda v: False,
    min_awake_s: float = MIN_AWAKE_S,
) -> float:
    """When a wake that puts `victims` to sleep may begin (>= now_s). While a victim is busy
    the answer is the deadline: look again when its work changes."""
    if not victims or now_s >= deadline_s:
        return now_s
    if any(busy(v) for v in victims):
        return deadline_s
    protected = max(woke_s(v) + min_awake_s for v in victims)
    if not math.isfinite(protected):
        return now_s
    return min(max(protected, now_s), deadline_s)
