"""The engine's batch loop compiled with numba: the same arithmetic as `instance.Engine`, in
the same order, so both give identical numbers (a test checks it); `Engine` stays the
readable reference and the path without numba.

State lives in three arrays so one compiled call does a whole busy period:
- `f` float64: times, the step model and the step-time jitter's current block of
  multipliers (`F_*` below);
- `iv` int64: counters, the lone request in flight and the jitter's place (`I_*`);
- `q` int64 rows of `instance.RID..EMITTED`: rows [0, max_seqs) are the running batch in
  admission order, the rest a ring buffer of the waiting queue (head at `I_WHEAD`).
Compiled functions are cached on disk by numba (first use in a fresh install compiles);
the entry points and `FastEngine` over them are `fastengine`'s.

Step-time jitter draws the reference engine's multipliers: the same seeded blocks
(`steptime.jitter`, drawn by numpy in object mode once per block), taken in the same order.
"""

from __future__ import annotations

import contextlib
import types

import numpy as np

from planner.optimizer.perf.types import WAKE_KNOTS
from planner.optimizer.sim.instance import CTX, DEC, EMITTED, KV, PF, RID
from planner.optimizer.sim.steptime import (
    FIRST_STEP_S,
    JITTER_BLOCK,
    decode_run,
    jitter_block,
    steps_time_s,
    steps_until,
    wake_after_s,
)
from planner.optimizer.sim.steptime import _first_reaching as _first_reaching_py
from planner.optimizer.sim.steptime import _memory_bound_run as _memory_bound_run_py

try:
    import numba
except ImportError:  # the pure-Python engine serves alone
    numba = None

AVAILABLE = numba is not None
# numpy's seeded generator is not compiled: a block of multipliers is drawn in object mode
_objmode = numba.objmode if numba is not None else contextlib.nullcontext

F_T, F_BUSY, F_FREE, F_LSTART, F_LUNTIL, F_LDUR = range(6)
F_OVH, F_DENSE, F_EXPERT, F_NEXP, F_EPT, F_KVR, F_CPT, F_APP, F_COMMT, F_COMML = range(6, 16)
# StepModel.eager_s, graph_max_tokens, seq_s
F_EAGER = 16
F_GMAX = 17
F_SEQ = 18
F_JCV = 19  # jitter's coefficient of variation (0: off)
F_LFORM = 20  # when the lone request's first step took its batch (Engine.lone_formed)
F_WAKE = 21  # InstancePerf.wake_knots from here: a request that finds the engine idle waits more
F_JBUF = F_WAKE + 2 * WAKE_KNOTS  # the jitter's block of multipliers from here
F_LEN = F_JBUF + JITTER_BLOCK
I_KV, I_NRUN, I_WHEAD, I_WLEN, I_PRE, I_CAP, I_MAXS, I_BUDGET, I_GEN = range(9)
I_LONE, I_LINP, I_LCACHED, I_LOUT, I_DENSE = range(9, 14)
I_JI, I_JBLOCKS = 14, 15  # next multiplier in the block; blocks drawn
I_LEN = 16
BIG = 1 << 62  # "no limit yet" for a step count


def _jit(fn=None, *, nogil: bool = True, **callees):
    """Compile `fn`; `callees` rebind the globals it calls to their compiled versions (the
    reference functions of `instance` are compiled as they are, not copied)."""
    if fn is None:
        return lambda f: _jit(f, nogil=nogil, **callees)
    if numba is None:
        return fn
    if callees:
        fn = types.FunctionType(fn.__code__, {**fn.__globals__, **callees}, fn.__name__)
    return numba.njit(cache=True, nogil=nogil)(fn)


_first_reaching = _jit(_first_reaching_py)
_steps_time_s = _jit(steps_time_s)
_wake_after_s = _jit(wake_after_s)
_steps_until = _jit(steps_until, steps_time_s=_steps_time_s, _first_reaching=_first_reaching)
_decode_run = _jit(
    decode_run,
    _memory_bound_run=_jit(_memory_bound_run_py, _first_reaching=_first_reaching),
    steps_until=_steps_until,
    steps_time_s=_steps_time_s,
)


def _fill_block(f, blocks):
    """Draw the engine's next block of multipliers into `f` (numpy, object mode)."""
    f[F_JBUF:] = jitter_block(f[F_JCV], blocks)


@_jit(nogil=False)  # it takes the GIL back for numpy anyway
def _jitter(f, iv):
    """`Engine._jitter`: the next step-time multiplier of this engine."""
    if iv[I_JI] >= JITTER_BLOCK:
        iv[I_JBLOCKS] += 1
        blocks = iv[I_JBLOCKS]
        with _objmode():
            _fill_block(f, blocks)
        iv[I_JI] = 0
    iv[I_JI] += 1
    return f[F_JBUF + iv[I_JI] - 1]


@_jit
def _push(iv, q, rid, cached, pf, dec, kv, emitted, front):
    """Append (or, `front`, prepend) a waiting sequence; the caller keeps room."""
    base = iv[I_MAXS]
    wcap = q.shape[0] - base
    if front:
        iv[I_WHEAD] = (iv[I_WHEAD] - 1) % wcap
        pos = base + iv[I_WHEAD]
    else:
        pos = base + (iv[I_WHEAD] + iv[I_WLEN]) % wcap
    q[pos, RID] = rid
    q[pos, CTX] = cached
    q[pos, PF] = pf
    q[pos, DEC] = dec
    q[pos, KV] = kv
    q[pos, EMITTED] = emitted
    iv[I_WLEN] += 1


@_jit
def _enqueue(iv, q, rid, inp, cached, out):
    _push(iv, q, rid, cached, inp - cached, out - 1, 0, 0, False)


@_jit
def _step_time(f, iv, new, kv, pairs, seqs):
    """`StepModel.time_s` (the dense shortcut of `Engine._one_step` where it applies)."""
    fixed = f[F_OVH] + (f[F_EAGER] if new > f[F_GMAX] else 0.0) + f[F_SEQ] * seqs
    if iv[I_DENSE]:
        mem = f[F_DENSE] + f[F_KVR] * kv
        comp = f[F_CPT] * new + f[F_APP] * pairs
        return fixed + (mem if mem > comp else comp)
    touched = 0.0
    if f[F_NEXP] != 0 and new > 0:
        miss = (1.0 - f[F_EPT] / f[F_NEXP]) ** new
        touched = f[F_NEXP] * (1.0 - miss)
    mem_s = f[F_DENSE] + f[F_EXPERT] * touched + f[F_KVR] * kv
    compute_s = f[F_CPT] * new + f[F_APP] * pairs
    comm_s = f[F_COMML] + f[F_COMMT] * new if f[F_COMML] else 0.0
    return fixed + (compute_s if compute_s > mem_s else mem_s) + comm_s


@_jit
def _retire(iv, q, finish_s, t, kv_used):
    keep = 0
    for i in range(iv[I_NRUN]):
        if q[i, DEC] == 0 and q[i, PF] == 0:
            finish_s[q[i, RID]] = t
            kv_used -= q[i, KV]
        else:
            if keep != i:
                q[keep, :] = q[i, :]
            keep += 1
    iv[I_NRUN] = keep
    return kv_used


@_jit
def _preempt(iv, q, kv_used):
    """`Engine._preempt`."""
    n_run = iv[I_NRUN]
    n_dec = 0
    for i in range(n_run):
        if q[i, PF] == 0:
            n_dec += 1
    while n_run > 1 and kv_used + n_dec > iv[I_CAP]:
        v = n_run - 1
        n_run -= 1
        kv_used -= q[v, KV]
        if q[v, PF] == 0:
            n_dec -= 1
        iv[I_NRUN] = n_run
        _push(iv, q, q[v, RID], 0, q[v, CTX] + q[v, PF], q[v, DEC], 0, q[v, EMITTED], True)
        iv[I_PRE] += 1
    return kv_used


@_jit
def _form_batch(iv, q, kv_used, dec, chunk_i, chunk_c):
    """`Engine._form_batch`: the rows of this step's decoding sequences into `dec` and of
    its prefill chunks into `chunk_i` (their sizes in `chunk_c`); (KV tokens held, new
    tokens, context tokens read, attention pairs, decoding sequences, prefill chunks)."""
    n_run = iv[I_NRUN]
    base = iv[I_MAXS]
    wcap = q.shape[0] - base
    budget = iv[I_BUDGET]
    new = 0.0
    kv = 0.0
    pairs = 0.0
    n_dec = 0
    n_chunks = 0
    for i in range(n_run):
        if budget <= 0:
            break
        if q[i, PF]:
            c = q[i, PF] if q[i, PF] < budget else budget
            chunk_i[n_chunks] = i
            chunk_c[n_chunks] = c
            n_chunks += 1
            pairs += c * (q[i, CTX] + (c + 1) / 2)
        else:
            c = 1
            dec[n_dec] = i
            n_dec += 1
            pairs += q[i, CTX] + 1.0
        budget -= c
        new += c
        kv += q[i, CTX]
    while budget > 0 and iv[I_WLEN] and n_run < iv[I_MAXS]:
        h = base + iv[I_WHEAD]
        need = q[h, CTX] + q[h, PF]
        if n_run and kv_used + need > iv[I_CAP]:
            break
        q[n_run, :] = q[h, :]
        iv[I_WHEAD] = (iv[I_WHEAD] + 1) % wcap
        iv[I_WLEN] -= 1
        i = n_run
        q[i, KV] = need
        kv_used += need
        n_run += 1
        c = q[i, PF] if q[i, PF] < budget else budget
        chunk_i[n_chunks] = i
        chunk_c[n_chunks] = c
        n_chunks += 1
        budget -= c
        new += c
        kv += q[i, CTX]
        pairs += c * (q[i, CTX] + (c + 1) / 2)
    iv[I_NRUN] = n_run
    return kv_used, new, kv, pairs, n_dec, n_chunks


@_jit
def _decode_step_done(q, dec, n_dec):
    """The decode half of `Engine._step_done`: whether a sequence is done."""
    finished = False
    for k in range(n_dec):
        i = dec[k]
        q[i, CTX] += 1
        q[i, KV] += 1
        q[i, DEC] -= 1
        if not q[i, DEC]:
            finished = True
    return finished


@_jit
def _prefill_step_done(q, first_s, t, chunk_i, chunk_c, n_chunks):
    """The prefill half of `Engine._step_done`: whether a sequence is done."""
    finished = False
    for k in range(n_chunks):
        i = chunk_i[k]
        c = chunk_c[k]
        q[i, CTX] += c
        q[i, PF] -= c
        if not q[i, PF]:
            if q[i, EMITTED]:
                q[i, DEC] -= 1
            else:
                q[i, EMITTED] = 1
                first_s[q[i, RID]] = t
            if not q[i, DEC]:
                finished = True
    return finished


# numba: the engine's arrays are its arguments (no objects in compiled code)
@_jit
def _one_step(f, iv, q, first_s, finish_s, t, busy_s, kv_used, dec, chunk_i, chunk_c):  # noqa: PLR0913
    """`Engine._one_step`."""
    if iv[I_NRUN] > 1 and kv_used + iv[I_NRUN] > iv[I_CAP]:
        kv_used = _preempt(iv, q, kv_used)
    kv_used, new, kv, pairs, n_dec, n_chunks = _form_batch(iv, q, kv_used, dec, chunk_i, chunk_c)
    if not new:
        return t, busy_s, kv_used
    dt = _step_time(f, iv, new, kv, pairs, n_dec + n_chunks)
    if f[F_JCV] > 0:
        dt *= _jitter(f, iv)
    t += dt
    busy_s += dt
    finished = _decode_step_done(q, dec, n_dec)
    kv_used += n_dec
    if _prefill_step_done(q, first_s, t, chunk_i, chunk_c, n_chunks):
        finished = True
    if finished:
        kv_used = _retire(iv, q, finish_s, t, kv_used)
    return t, busy_s, kv_used


@_jit
def _decode_run_length(iv, q, kv_used):
    """`Engine._decode_run_length`."""
    n = iv[I_NRUN]
    if n == 1:
        return (0 if q[0, PF] else q[0, DEC]), q[0, CTX]
    k = BIG
    kv0 = 0
    for i in range(n):
        if q[i, PF]:
            return 0, kv0
        if q[i, DEC] < k:
            k = q[i, DEC]
        kv0 += q[i, CTX]
    room = (iv[I_CAP] - kv_used) // n
    if room < k:
        k = room
    return k, kv0


@_jit(nogil=False)  # _jitter takes the GIL back for numpy
def _decode_run_coeffs(f, iv, co, n, kv0):
    """`Engine._decode_run_coeffs` (`co`: `decode_coeffs` at zero context by batch size)."""
    fixed = co[n, 0]
    m0 = co[n, 1]
    m1 = co[n, 2]
    c0 = co[n, 3]
    c1 = co[n, 4]
    m0 += f[F_KVR] * kv0
    c0 += f[F_APP] * kv0
    if f[F_JCV] > 0:  # one multiplier scales every step of the run
        u = _jitter(f, iv)
        fixed = fixed * u
        m0 = m0 * u
        m1 = m1 * u
        c0 = c0 * u
        c1 = c1 * u
    return fixed, m0, m1, c0, c1


@_jit
def _decode_run_done(iv, q, finish_s, t, k, kv_used):
    """`Engine._decode_run_done`."""
    n = iv[I_NRUN]
    kv_used += n * k
    done = False
    for i in range(n):
        q[i, CTX] += k
        q[i, KV] += k
        q[i, DEC] -= k
        if not q[i, DEC]:
            done = True
    if done:
        kv_used = _retire(iv, q, finish_s, t, kv_used)
    return kv_used


@_jit
def advance(f, iv, q, co, first_s, finish_s, until_s):
    """`Engine.advance_to`: whether the engine is still busy at `until_s`."""
    if f[F_T] >= until_s and (iv[I_NRUN] or iv[I_WLEN]):
        if not f[F_LFORM] < until_s < f[F_T] == f[F_LSTART]:
            return True
        until_s = f[F_T] + FIRST_STEP_S  # the first step after a wake-up (Engine.advance_to)
    t = f[F_T]
    kv_used = iv[I_KV]
    busy_s = f[F_BUSY]
    cap, max_seqs = iv[I_CAP], iv[I_MAXS]
    base = iv[I_MAXS]
    dec = np.empty(max_seqs, np.int64)
    chunk_i = np.empty(max_seqs, np.int64)
    chunk_c = np.empty(max_seqs, np.int64)
    while (iv[I_NRUN] or iv[I_WLEN]) and t < until_s:
        n = iv[I_NRUN]
        decode_run = False
        if not n:
            if t < f[F_FREE]:
                t = f[F_FREE]
                if t >= until_s:
                    break
        else:
            h = base + iv[I_WHEAD]
            decode_run = not (iv[I_WLEN] and n < max_seqs and kv_used + q[h, CTX] + q[h, PF] <= cap)
        if decode_run:
            k, kv0 = _decode_run_length(iv, q, kv_used)
            if k > 1:
                fixed, m0, m1, c0, c1 = _decode_run_coeffs(f, iv, co, n, kv0)
                k, dt = _decode_run(fixed, m0, m1, c0, c1, k, until_s - t)
                t += dt
                busy_s += dt
                kv_used = _decode_run_done(iv, q, finish_s, t, k, kv_used)
                continue
        t, busy_s, kv_used = _one_step(
            f, iv, q, first_s, finish_s, t, busy_s, kv_used, dec, chunk_i, chunk_c
        )
    f[F_T] = t
    iv[I_KV] = kv_used
    f[F_BUSY] = busy_s
    if not iv[I_NRUN] and not iv[I_WLEN]:
        iv[I_GEN] = 0
        f[F_FREE] = t
        return False
    return True
