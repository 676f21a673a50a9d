"""Replicas that never sleep, in one compiled call: the requests of a model whose instances
are all `gpu` tier, routed as `Router.route` and `simulator._run_routed` route them.

Such instances are never woken, put to sleep or displaced, and no other model's routing
reads their engines, so their model can be simulated on its own, ahead of the routed
requests of the others, with the same numbers. With the compiled engine (`kernel`) the
whole model is one call: the per-request Python routing (about 10 us a request) was most of
the time of a point with replicas on a big trace. The pure-Python engine keeps the routed
path, the reference the identical-numbers test compares this with.
"""

from __future__ import annotations

import numpy as np

from planner.optimizer.sim.fastengine import FastEngine, outstanding, submit
from planner.optimizer.sim.kernel import (
    I_GEN,
    I_LONE,
    I_MAXS,
    I_WLEN,
    _jit,
)
from planner.optimizer.sim.lonememo import lone_pair


# numba kernel: the engine's arrays are its arguments (no objects in compiled code)
@_jit
def _route_all(  # noqa: PLR0913
    F,
    IV,
    Q,
    CO,
    first_s,
    finish_s,
    delay,
    rid,
    ta,
    inp,
    cached,
    out,
    sess,
    lone,
    seen,
    bound,
    inst,
    hit,
):
    """Each request (in arrival order) to the replica with the fewest outstanding requests
    (ties: plan order), or refused (`inst` -1) where they hold `bound` together; its prefix
    is a cache hit where its session was served there before. `lone[:, k]` rows: (miss
    first token, miss total, hit first token, hit total) of replica k. The caller sized
    every ring for all the requests."""
    k = F.shape[0]
    for j in range(len(rid)):
        t = ta[j]
        best = -1
        best_load = 0
        held = 0
        for i in range(k):
            load = outstanding(F[i], IV[i], Q[i], CO[i], first_s, finish_s, t)
            held += load
            if best < 0 or load < best_load:
                best = i
                best_load = load
        if held >= bound:  # the gateway refuses it
            inst[j] = -1
            continue
        inst[j] = best
        c = cached[j]
        key = sess[j]
        row = 0  # the miss times
        if key >= 0:
            if c and seen[best, key]:
                hit[j] = True
                row = 2
            else:
                seen[best, key] = True
        used = c if row else 0
        submit(
            F[best],
            IV[best],
            Q[best],
            CO[best],
            first_s,
            finish_s,
            rid[j],
            t + delay[best],
            inp[j],
            used,
            out[j],
            lone[row, best, j],
            lone[row + 1, best, j],
        )


def route_replicas(
    engines: list[FastEngine],
    delay_s: list[float],
    rid: np.ndarray,
    arrival_s: np.ndarray,
    inp: np.ndarray,
    cached: np.ndarray,
    out: np.ndarray,
    session: np.ndarray,
    lone: np.ndarray,
    bound: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(replica of each request or -1 where `bound` requests were held and it was refused,
    prefix hit of each) for one model's requests on fresh engines; the engines hold their
    state afterwards (to drain). `lone`: shape (4, k, n)."""
    n, k = len(rid), len(engines)
    assert all(not e.iv[I_GEN] and e.iv[I_LONE] < 0 and not e.iv[I_WLEN] for e in engines)
    rows = max(int(e.iv[I_MAXS]) for e in engines) + n + 4  # running rows + a ring for all
    F = np.stack([e.f for e in engines])
    IV = np.stack([e.iv for e in engines])  # empty queues: the ring may grow as it is
    Q = np.zeros((k, rows, engines[0].q.shape[1]), dtype=np.int64)
    CO = np.zeros((k, max(len(e.co) for e in engines), engines[0].co.shape[1]))
    for i, e in enumerate(engines):
        CO[i, : len(e.co)] = e.co
    known = session[session >= 0]
    seen = np.zeros((k, int(known.max()) + 1 if len(known) else 1), dtype=np.bool_)
    inst = np.zeros(n, dtype=np.int64)
    hit = np.zeros(n, dtype=np.bool_)
    first_s, finish_s = engines[0].first_s, engines[0].finish_s
    _route_all(
        F,
        IV,
        Q,
        CO,
        first_s,
        finish_s,
        np.asarray(delay_s, dtype=np.float64),
        rid,
        arrival_s,
        inp,
        cached,
        out,
        session,
        lone,
        seen,
        bound,
        inst,
        hit,
    )
    for i, e in enumerate(engines):
        e.f = F[i]
        e.iv = IV[i]
        e.q = Q[i]
    return inst, hit


def run_replicas(
    slots: list, model: int, idx: np.ndarray, req, out, perfs: dict, *, memo: bool, bound: int
) -> None:
    """All requests `idx` of `model` on its never-sleeping replicas `slots` (module doc),
    written into the outcome `out`, those that find `bound` requests held refused; `memo`:
    see `lonememo.lone_times_of`."""
    inp = req.input_tokens[idx]
    cached = req.cached_tokens[idx]
    outk = req.output_tokens[idx]
    lone = np.empty((4, len(slots), len(idx)))
    for k, s in enumerate(slots):
        lone[:, k] = lone_pair(req, model, perfs[s.id], inp, cached, outk, memo)
    inst, hit = route_replicas(
        [s.engine for s in slots],
        [s.engine_delay_s for s in slots],
        idx.astype(np.int64),
        req.arrival_s[idx],
        inp,
        cached,
        outk,
        req.session[idx],
        lone,
        bound,
    )
    refused = inst < 0
    out.instance[idx] = np.where(refused, -1, np.array([s.index for s in slots])[inst])
    out.cache_hit[idx] = hit
    out.refused[idx] = refused
