"""An instance alone with its model's requests: the only one of its model and never displaced
(`simulator`'s first path). Its requests are computed with numpy: all as lone requests, then
only the busy periods (a request arriving before the previous one finished) are re-run
through the batch engine; and, as the answer does not depend on the rest of the point, it is
remembered per trace for the next point that holds the same instance.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict

import numpy as np

from planner.optimizer.sim.instance import Engine
from planner.optimizer.sim.request import Outcome, Requests
from planner.optimizer.sim.router import Slot

# An instance alone with its model's requests gives the same answer whatever else the
# point holds; the optimizer simulates many points sharing such instances on one trace
# (passed as the same `Requests`). Keyed by (the trace's fingerprint, model, perf): values,
# not identities.
_CACHE: OrderedDict[tuple, tuple] = OrderedDict()
CACHE_SIZE = 64


def remember(key: tuple, s: Slot, idx: np.ndarray, out: Outcome) -> None:
    eng = s.engine
    _CACHE[key] = (
        out.first_token_s[idx].copy(),
        out.finish_s[idx].copy(),
        out.cache_hit[idx].copy(),
        out.refused[idx].copy(),
        eng.busy_s,
        eng.preemptions,
        eng.free_s,
    )
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)


def recall(key: tuple, s: Slot, idx: np.ndarray, out: Outcome) -> bool:
    hit = _CACHE.get(key)
    if hit is None:
        return False
    _CACHE.move_to_end(key)
    first, finish, cache_hit, refused, busy_s, preemptions, free_s = hit
    out.first_token_s[idx] = first
    out.finish_s[idx] = finish
    out.cache_hit[idx] = cache_hit
    out.refused[idx] = refused
    out.instance[idx] = np.where(refused, -1, s.index)
    s.engine.busy_s = busy_s
    s.engine.preemptions = preemptions
    s.engine.free_s = free_s
    return True


def session_hits(sess: np.ndarray, cached: np.ndarray) -> np.ndarray:
    """Whether each request finds its cached prefix on an instance that never sleeps: it has
    cached tokens and an earlier call of the same session exists."""
    seen = np.zeros(len(sess), dtype=bool)
    known = np.flatnonzero(sess >= 0)
    if len(known):
        _, first = np.unique(sess[known], return_index=True)
        seen[known] = True
        seen[known[first]] = False
    return seen & (cached > 0)


def refusals_left_hits(req: Requests, idx: np.ndarray, out: Outcome) -> bool:
    """Whether a served request of `idx` counted its prefix cached (`session_hits`) where
    every earlier call of its session was refused: nothing had cached it. The run is then
    wrong for that model (the hits are fixed before the batch loop refuses)."""
    refused = out.refused[idx]
    if not refused.any():
        return False
    kept = idx[~refused]
    return bool(
        (out.cache_hit[kept] & ~session_hits(req.session[kept], req.cached_tokens[kept])).any()
    )


def lone_wakes(
    ta: np.ndarray, tot: np.ndarray, knots: tuple[float, ...], free_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """(wake-up, the engine's free time before) of each request as if each ran alone: by
    the time since the one before finished (`steptime.wake_after_s`). A predecessor's end
    takes its own wake-up from the pass before (the first: the curve's end): the wake-ups
    are milliseconds, the idle times they scale with mostly far longer."""
    k = len(knots) // 2
    gaps, wakes = np.array(knots[:k]), np.array(knots[k:])
    w = np.full(len(ta), wakes[-1])
    prev = np.concatenate(([free_s], ta[:-1] + w[:-1] + tot[:-1]))
    if np.any(wakes != wakes[-1]):
        w = np.interp(ta - prev, gaps, wakes)
        prev = np.concatenate(([free_s], ta[:-1] + w[:-1] + tot[:-1]))
        w = np.interp(ta - prev, gaps, wakes)
    return w, prev


def run_alone(
    s: Slot,
    idx: np.ndarray,
    req: Requests,
    out: Outcome,
    hit: np.ndarray,
    pf: np.ndarray,
    tot: np.ndarray,
    bound: int,
) -> None:
    """All requests of a model on its one never-displaced instance, vectorized. `pf`/`tot`
    are their lone times with the prefix cache where `hit`. A request that finds `bound`
    requests held when it arrives is refused (`planner.optimizer.admission`)."""
    arr = req.arrival_s[idx]
    ta = arr + s.engine_delay_s
    eng = s.engine
    # a lone request finds the engine idle: it waits for it to wake
    wake, prev_free = lone_wakes(ta, tot, eng.wake_knots, eng.free_s)
    start = ta + wake
    cached = np.where(hit, req.cached_tokens[idx], 0)
    out.first_token_s[idx] = start + pf
    out.finish_s[idx] = start + tot
    out.instance[idx] = s.index
    out.cache_hit[idx] = hit
    # Busy periods: request j+1 arrives before request j (alone) would have finished.
    overlap = np.flatnonzero(ta[1:] < start[:-1] + tot[:-1])
    in_busy = refused = np.zeros(len(idx), dtype=bool)
    if len(overlap):
        args = (
            idx.astype(np.int64),
            arr,
            ta,
            req.input_tokens[idx],
            cached.astype(np.int64),
            req.output_tokens[idx],
            pf,
            tot,
            overlap.astype(np.int64),
            prev_free,
            bound,
        )
        # the compiled engine loops in one call; the reference engine here, the same loop
        in_busy, refused = _run_busy(eng, *args) if isinstance(eng, Engine) else eng.run_busy(*args)
    if refused.any():
        gone = idx[refused]
        out.first_token_s[gone] = out.finish_s[gone] = np.nan
        out.instance[gone] = -1
        out.cache_hit[gone] = False
        out.refused[gone] = True
    eng.busy_s += float(tot[~in_busy].sum())
    # a last request that joined a batch did not wait for a wake; a refused one left nothing
    if len(idx) and not refused[-1]:
        last = (ta if in_busy[-1] else start)[-1] + tot[-1]
        eng.free_s = max(eng.free_s, float(last))


# The pure-Python twin of the numba kernel `fastengine.run_busy`, argument for argument.
def _run_busy(  # noqa: PLR0913
    eng: Engine, rid, arr, ta, inp, cached, out, pf, tot, over, prev_free, bound: int
) -> tuple[np.ndarray, np.ndarray]:
    """`FastEngine.run_busy` on the pure-Python engine: the busy periods of one model's
    requests, (which requests were in one, which of those were refused)."""
    # Python scalars for the per-request loop (numpy scalar access is slow).
    rid_l = rid.tolist()
    arr_l = arr.tolist()
    ta_l = ta.tolist()
    pf_l = pf.tolist()
    tot_l = tot.tolist()
    inp_l = inp.tolist()
    cached_l = cached.tolist()
    out_l = out.tolist()
    n = len(rid_l)
    busy_l = [False] * n
    refused_l = [False] * n
    over_l = over.tolist()
    n_over = len(over_l)
    advance = eng.advance_to
    submit = eng.submit
    enqueue = eng.enqueue
    p = 0
    while p < n_over:
        j = over_l[p]
        k = j
        eng.free_s = max(eng.free_s, float(prev_free[j]))
        held = 0  # requests the engine holds at most (j found it empty)
        while k < n:
            tk = ta_l[k]
            if k > j:
                if held >= bound:
                    held = eng.outstanding(arr_l[k])
                    if held >= bound:  # the gateway refuses it
                        refused_l[k] = busy_l[k] = True
                        k += 1
                        continue
                if eng.general and advance(tk):  # still busy at tk: k joins the batch
                    enqueue(rid_l[k], inp_l[k], cached_l[k], out_l[k])
                    busy_l[k] = True
                    held += 1
                    k += 1
                    continue
                if eng.free_s <= tk:
                    break  # the engine is empty when k arrives: k is alone again
            submit(rid_l[k], tk, inp_l[k], cached_l[k], out_l[k], pf_l[k], tot_l[k])
            busy_l[k] = True
            held += 1
            k += 1
        eng.drain()
        p = bisect.bisect_left(over_l, k, p)  # the first overlap at or after k
    return np.array(busy_l, dtype=bool), np.array(refused_l, dtype=bool)


def clear() -> None:
    """Forget the remembered answers."""
    _CACHE.clear()
