"""The compiled engine's entry points and `FastEngine`, `instance.Engine`'s interface over
them: a request submitted, the requests outstanding, a model's busy periods in one call
(`kernel` holds the state layout and the batch loop they drive).
"""

from __future__ import annotations

import math

import numpy as np

from planner.optimizer.perf.types import WAKE_KNOTS, InstancePerf
from planner.optimizer.sim.kernel import (
    F_BUSY,
    F_FREE,
    F_JCV,
    F_LDUR,
    F_LEN,
    F_LFORM,
    F_LSTART,
    F_LUNTIL,
    F_OVH,
    F_T,
    F_WAKE,
    I_BUDGET,
    I_CAP,
    I_DENSE,
    I_GEN,
    I_JI,
    I_LCACHED,
    I_LEN,
    I_LINP,
    I_LONE,
    I_LOUT,
    I_MAXS,
    I_NRUN,
    I_PRE,
    I_WHEAD,
    I_WLEN,
    _enqueue,
    _jit,
    _wake_after_s,
    advance,
)
from planner.optimizer.sim.steptime import JITTER_BLOCK, decode_coeffs


# numba kernel: the engine's arrays are its arguments (no objects in compiled code)
@_jit
def submit(f, iv, q, co, first_s, finish_s, rid, t_s, inp, cached, out, pf_s, total_s):  # noqa: PLR0913
    """`Engine.submit`; False (and nothing done) when the ring needs room first."""
    if iv[I_NRUN] + iv[I_WLEN] + 3 > q.shape[0] - iv[I_MAXS]:
        return False
    while True:
        if iv[I_GEN]:
            advance(f, iv, q, co, first_s, finish_s, t_s)
            if iv[I_GEN]:
                _enqueue(iv, q, rid, inp, cached, out)
                return True
        if iv[I_LONE] < 0 or f[F_LUNTIL] <= t_s:
            idle_s = t_s - f[F_FREE]
            if idle_s > 0:
                start = t_s + _wake_after_s(idle_s, f[F_WAKE : F_WAKE + 2 * WAKE_KNOTS])
            else:
                start = f[F_FREE]
            iv[I_LONE] = rid
            iv[I_LINP] = inp
            iv[I_LCACHED] = cached
            iv[I_LOUT] = out
            f[F_LFORM] = t_s if idle_s > 0 else start
            f[F_LSTART] = start
            f[F_LDUR] = total_s
            f[F_LUNTIL] = f[F_FREE] = start + total_s
            first_s[rid] = start + pf_s
            finish_s[rid] = start + total_s
            f[F_BUSY] += total_s
            return True
        # materialize: the lone request in flight becomes a batch simulated from its start
        lone = iv[I_LONE]
        f[F_BUSY] -= f[F_LDUR]
        iv[I_LONE] = -1
        f[F_LUNTIL] = -math.inf
        iv[I_GEN] = 1
        f[F_T] = f[F_FREE] = f[F_LSTART]
        _enqueue(iv, q, lone, iv[I_LINP], iv[I_LCACHED], iv[I_LOUT])


@_jit
def outstanding(f, iv, q, co, first_s, finish_s, t_s):
    """`Engine.outstanding`."""
    if iv[I_GEN]:
        advance(f, iv, q, co, first_s, finish_s, t_s)
        if iv[I_GEN]:
            return iv[I_NRUN] + iv[I_WLEN]
    return 1 if iv[I_LONE] >= 0 and f[F_LUNTIL] > t_s else 0


# numba kernel: the engine's arrays are its arguments (no objects in compiled code)
@_jit
def run_busy(  # noqa: PLR0913
    f,
    iv,
    q,
    co,
    first_s,
    finish_s,
    rid,
    arr,
    ta,
    inp,
    cached,
    out,
    pf,
    tot,
    over,
    prev_free,
    bound,
    busy,
    refused,
):
    """The busy periods of `alone.run_alone` (same loop); the caller sized the ring
    for every request of the model."""
    n = len(rid)
    n_over = len(over)
    p = 0
    while p < n_over:
        j = over[p]
        k = j
        f[F_FREE] = max(f[F_FREE], prev_free[j])
        held = 0  # requests the engine holds at most (j found it empty)
        while k < n:
            tk = ta[k]
            if k > j:
                if held >= bound:
                    held = outstanding(f, iv, q, co, first_s, finish_s, arr[k])
                    if held >= bound:  # the gateway refuses it
                        refused[k] = True
                        busy[k] = True
                        k += 1
                        continue
                if iv[I_GEN] and advance(f, iv, q, co, first_s, finish_s, tk):
                    _enqueue(iv, q, rid[k], inp[k], cached[k], out[k])
                    busy[k] = True
                    held += 1
                    k += 1
                    continue
                if f[F_FREE] <= tk:
                    break
            submit(
                f,
                iv,
                q,
                co,
                first_s,
                finish_s,
                rid[k],
                tk,
                inp[k],
                cached[k],
                out[k],
                pf[k],
                tot[k],
            )
            busy[k] = True
            held += 1
            k += 1
        if iv[I_GEN]:
            advance(f, iv, q, co, first_s, finish_s, math.inf)
        p = p + np.searchsorted(over[p:], k)


class FastEngine:
    """`instance.Engine`'s interface over the compiled loop (module docstring)."""

    __slots__ = ("co", "f", "finish_s", "first_s", "iv", "q")

    def __init__(self, perf: InstancePerf, first_s: np.ndarray, finish_s: np.ndarray):
        st = perf.step
        max_seqs = max(int(perf.max_num_seqs), 1)
        self.f = np.zeros(F_LEN)
        self.f[F_FREE] = -math.inf
        self.f[F_LUNTIL] = -math.inf
        self.f[F_OVH:F_JCV] = (
            st.overhead_s,
            st.dense_weight_read_s,
            st.expert_read_s,
            st.num_experts,
            st.experts_per_tok,
            st.kv_read_s_per_token,
            st.compute_s_per_token,
            st.attn_s_per_pair,
            st.comm_s_per_token,
            st.comm_latency_s,
            st.eager_s,
            float(st.graph_max_tokens),
            st.seq_s,
        )
        self.f[F_JCV] = perf.step_jitter_cv if perf.step_jitter_cv > 0 else 0.0
        self.f[F_WAKE : F_WAKE + 2 * WAKE_KNOTS] = perf.wake_knots()
        self.iv = np.zeros(I_LEN, dtype=np.int64)
        self.iv[I_JI] = JITTER_BLOCK  # no block drawn yet
        self.iv[I_CAP] = max(int(perf.max_kv_tokens), 1)
        self.iv[I_MAXS] = max_seqs
        self.iv[I_BUDGET] = max(int(perf.chunk_tokens), 1)
        self.iv[I_LONE] = -1
        self.iv[I_DENSE] = int(not st.num_experts and not st.comm_latency_s)
        self.q = np.zeros((2 * max_seqs + 2, 6), dtype=np.int64)
        co = np.zeros((max_seqs + 1, 5))
        for n in range(1, max_seqs + 1):
            co[n] = decode_coeffs(st, n, 0.0)
        self.co = co
        self.first_s, self.finish_s = first_s, finish_s

    def room(self, more: int) -> None:
        """Make the waiting ring hold every sequence in the engine plus `more`."""
        iv, q = self.iv, self.q
        base = int(iv[I_MAXS])
        wcap = len(q) - base
        need = int(iv[I_NRUN] + iv[I_WLEN]) + more + 1
        if need <= wcap:
            return
        new = np.zeros((base + max(need, 2 * wcap), 6), dtype=np.int64)
        new[:base] = q[:base]
        h, n = int(iv[I_WHEAD]), int(iv[I_WLEN])
        new[base : base + n] = q[base + (np.arange(h, h + n) % wcap)]
        iv[I_WHEAD] = 0
        self.q = new

    # Engine's attributes that the simulator and the router read and write
    @property
    def free_s(self) -> float:
        return float(self.f[F_FREE])

    @free_s.setter
    def free_s(self, v: float) -> None:
        self.f[F_FREE] = v

    @property
    def wake_knots(self) -> tuple[float, ...]:
        return tuple(float(x) for x in self.f[F_WAKE : F_WAKE + 2 * WAKE_KNOTS])

    @property
    def busy_s(self) -> float:
        return float(self.f[F_BUSY])

    @busy_s.setter
    def busy_s(self, v: float) -> None:
        self.f[F_BUSY] = v

    @property
    def preemptions(self) -> int:
        return int(self.iv[I_PRE])

    @preemptions.setter
    def preemptions(self, v: int) -> None:
        self.iv[I_PRE] = v

    @property
    def general(self) -> bool:
        return bool(self.iv[I_GEN])

    def submit(
        self, rid: int, t_s: float, inp: int, cached: int, out: int, pf_s: float, total_s: float
    ) -> None:
        """`Engine.submit`."""
        args = (rid, t_s, inp, cached, out, pf_s, total_s)
        while not submit(self.f, self.iv, self.q, self.co, self.first_s, self.finish_s, *args):
            self.room(2)

    def outstanding(self, t_s: float) -> int:
        """`Engine.outstanding`."""
        return outstanding(self.f, self.iv, self.q, self.co, self.first_s, self.finish_s, t_s)

    def drain(self) -> float:
        """`Engine.drain`."""
        if self.iv[I_GEN]:
            advance(self.f, self.iv, self.q, self.co, self.first_s, self.finish_s, math.inf)
        return float(self.f[F_FREE])

    # the kernel's per-request arrays, argument for argument
    def run_busy(  # noqa: PLR0913
        self, rid, arr, ta, inp, cached, out, pf, tot, over, prev_free, bound
    ) -> tuple[np.ndarray, np.ndarray]:
        """The busy periods of one model's requests: (which requests were in one, which of
        those found `bound` requests held at their arrival `arr` and were refused)."""
        self.room(len(rid) + 3)  # submit wants room for 3 more
        busy = np.zeros(len(rid), dtype=np.bool_)
        refused = np.zeros(len(rid), dtype=np.bool_)
        run_busy(
            self.f,
            self.iv,
            self.q,
            self.co,
            self.first_s,
            self.finish_s,
            rid,
            arr,
            ta,
            inp,
            cached,
            out,
            pf,
            tot,
            over,
            prev_free,
            bound,
            busy,
            refused,
        )
        return busy, refused
