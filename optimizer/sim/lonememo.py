"""`lone_times` of one model's requests on one instance perf, memoized per trace.

The optimizer simulates many points on one trace (passed as the same `Requests`) and an
instance perf recurs across them; recomputing its lone times (numpy over every request of
the model, at every simulation) was about a tenth of a big search's simulator time. Keyed
by (the trace's fingerprint, model, perf, which prefixes count as cached), values not
identities; the memo holds at most `MAX_VALUES` floats (least recently used entries go
first). Callers must not write into the arrays it returns.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.sim.request import Requests
from planner.optimizer.sim.steptime import lone_times

MAX_VALUES = 8_000_000  # floats held by all entries together (64 MB)
_MEMO: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
_held = 0  # floats held


def lone_times_of(
    req: Requests,
    model: int,
    perf: InstancePerf,
    kind: str,
    inp: np.ndarray,
    cached: np.ndarray,
    out: np.ndarray,
    *,
    memo: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """`lone_times(perf, inp, cached, out)` for the requests of `model` in `req`; `kind`
    names how `cached` was derived from the trace (it is part of the key), `memo`: whether
    `req` is a trace the caller keeps (a `Requests` it passed in)."""
    global _held
    if not memo:
        return lone_times(perf, inp, cached, out)
    key = (req.fingerprint, model, perf, kind)
    hit = _MEMO.get(key)
    if hit is not None:
        _MEMO.move_to_end(key)
        return hit
    pf, tot = lone_times(perf, inp, cached, out)
    _MEMO[key] = (pf, tot)
    _held += 2 * len(pf)
    while _held > MAX_VALUES and len(_MEMO) > 1:
        _, (a, _) = _MEMO.popitem(last=False)
        _held -= 2 * len(a)
    return pf, tot


def clear() -> None:
    """Forget every entry (cold timings, tests)."""
    global _held
    _MEMO.clear()
    _held = 0


def lone_pair(
    req: Requests,
    model: int,
    perf: InstancePerf,
    inp: np.ndarray,
    cached: np.ndarray,
    out: np.ndarray,
    memo: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(first token, total) lone times with no prefix cached, then with the cached prefix
    of every request reused (the same arrays where nothing is cached)."""
    pf_m, tot_m = lone_times_of(
        req, model, perf, "miss", inp, np.zeros_like(cached), out, memo=memo
    )
    if not cached.any():
        return pf_m, tot_m, pf_m, tot_m
    pf_h, tot_h = lone_times_of(req, model, perf, "hit", inp, cached, out, memo=memo)
    return pf_m, tot_m, pf_h, tot_h
