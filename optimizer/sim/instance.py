"""One vLLM engine: continuous batching with chunked prefill, KV admission and preemption.

Scheduling follows vLLM V1: each step has a token budget (`chunk_tokens`); running
sequences are served first (one token for a decoding sequence, the next prefill chunk for a
prefilling one), then waiting sequences are admitted in FIFO order while the batch has room
(`max_num_seqs`), the budget has tokens and the KV cache has room for the whole prompt
(cached prefix included). When the decode tokens of the next step do not fit the KV cache,
the most recently admitted sequence is preempted: its KV is freed and it goes back to the
front of the queue to recompute its prompt and the tokens generated so far.

Speed. The engine never steps token by token:
- a request that finds the engine empty and leaves before the next request arrives is a
  *lone* request: its times come from `lone_times`, precomputed with numpy for the whole
  trace (the common case for a small team);
- otherwise the engine runs its batch, one step per prefill chunk and, while the batch
  only decodes, k steps at once with their summed time in closed form (`decode_time_s`).

Step times (closed forms, lone requests, jitter) are `steptime`'s.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.sim.steptime import (
    FIRST_STEP_S,
    _first_reaching,
    decode_coeffs,
    jitter_block,
    steps_time_s,
    steps_until,
    wake_after_s,
)

# A sequence in the engine: [request id, context tokens computed, prefill tokens left,
# decode tokens left, KV tokens held, first token already emitted (0/1)].
RID, CTX, PF, DEC, KV, EMITTED = range(6)


class Engine:
    """The batch state of one instance; times are absolute seconds of the simulation.

    `first_s`/`finish_s` are the simulation-wide result arrays (by request id) the engine
    writes first-token and last-token times into.
    """

    __slots__ = (
        "attn_s_per_pair",
        "budget",
        "busy_s",
        "cap",
        "coeff_cache",
        "dense",
        "finish_s",
        "first_s",
        "free_s",
        "general",
        "jit",
        "jit_blocks",
        "jit_cv",
        "jit_draws",
        "jit_i",
        "kv_read_s_per_token",
        "kv_used",
        "lone",
        "lone_args",
        "lone_dur",
        "lone_formed",
        "lone_start",
        "lone_until",
        "max_seqs",
        "preemptions",
        "running",
        "step",
        "t",
        "waiting",
        "wake_knots",
    )

    def __init__(self, perf: InstancePerf, first_s: np.ndarray, finish_s: np.ndarray):
        self.step = perf.step
        self.dense = not perf.step.num_experts and not perf.step.comm_latency_s
        self.jit = perf.step_jitter_cv > 0  # step-time jitter on (see `steptime`)
        self.jit_cv = perf.step_jitter_cv
        self.jit_draws: list[float] = []  # the current block of multipliers
        self.jit_i = 0  # next one in the block
        self.jit_blocks = 0  # blocks drawn
        self.kv_read_s_per_token = perf.step.kv_read_s_per_token  # hot-loop copies
        self.attn_s_per_pair = perf.step.attn_s_per_pair
        self.cap = max(int(perf.max_kv_tokens), 1)  # KV tokens, all sequences
        self.max_seqs = max(int(perf.max_num_seqs), 1)
        self.budget = max(int(perf.chunk_tokens), 1)  # tokens per step
        self.first_s = first_s
        self.finish_s = finish_s
        self.general = False  # a batch is being simulated step by step
        self.lone = -1  # request id of the lone request in flight, -1: none
        self.lone_args: tuple[int, int, int] = (0, 0, 0)
        self.lone_start = 0.0
        self.lone_formed = 0.0  # when the lone request's first step took its batch
        self.lone_until = -math.inf
        self.lone_dur = 0.0
        self.free_s = -math.inf  # earliest start of the next step
        self.t = 0.0
        self.running: list[list] = []
        self.waiting: deque[list] = deque()
        self.kv_used = 0
        self.busy_s = 0.0  # time with a step running, s
        # a request that finds the engine idle waits its wake-up more (by the idle time)
        self.wake_knots = perf.wake_knots()
        self.preemptions = 0
        # decode_coeffs at zero context by batch size (admission keeps it <= max_seqs)
        self.coeff_cache: list[tuple[float, float, float, float, float] | None] = [None] * (
            self.max_seqs + 1
        )

    # -- submission -------------------------------------------------------------------------
    def submit(
        self, rid: int, t_s: float, inp: int, cached: int, out: int, pf_s: float, total_s: float
    ) -> None:
        """Request `rid` reaches the engine at `t_s` (submissions come in time order).

        `pf_s`/`total_s` are its lone times (from `lone_times`, same `cached`)."""
        while True:
            if self.general:
                self.advance_to(t_s)
                if self.general:
                    self.enqueue(rid, inp, cached, out)
                    return
            if self.lone < 0 or self.lone_until <= t_s:
                # an idle engine first wakes up; one still at work takes the request in turn
                idle_s = t_s - self.free_s
                start = t_s + wake_after_s(idle_s, self.wake_knots) if idle_s > 0 else self.free_s
                self.lone = rid
                self.lone_args = (inp, cached, out)
                # vLLM fixes this step's batch on arrival; a wake-up delays the step, and one
                # arriving meanwhile takes the next (vLLM-CPU: prompts sent 1-3 ms apart)
                self.lone_formed = t_s if idle_s > 0 else start
                self.lone_start = start
                self.lone_dur = total_s
                self.lone_until = self.free_s = start + total_s
                self.first_s[rid] = start + pf_s
                self.finish_s[rid] = start + total_s
                self.busy_s += total_s
                return
            self._materialize()

    def _materialize(self) -> None:
        """Turn the lone request in flight into a batch simulated from its start."""
        rid = self.lone
        self.busy_s -= self.lone_dur
        self.lone = -1
        self.lone_until = -math.inf
        self.general = True
        self.t = self.free_s = self.lone_start
        self.enqueue(rid, *self.lone_args)

    def enqueue(self, rid: int, inp: int, cached: int, out: int) -> None:
        """Request `rid` joins the queue of a busy engine (which is at its arrival time)."""
        self.waiting.append([rid, cached, inp - cached, out - 1, 0, 0])

    # -- state queries ------------------------------------------------------------------------
    def outstanding(self, t_s: float) -> int:
        """Requests submitted and not finished at `t_s`."""
        if self.general:
            self.advance_to(t_s)
            if self.general:
                return len(self.running) + len(self.waiting)
        return 1 if self.lone >= 0 and self.lone_until > t_s else 0

    def drain(self) -> float:
        """Run everything submitted to completion; the time the engine is free again."""
        if self.general:
            self.advance_to(math.inf)
        return self.free_s

    # -- the batch ---------------------------------------------------------------------------
    def advance_to(self, until_s: float) -> bool:
        """Run every step that starts before `until_s`; whether the engine is still busy.

        One loop with the engine's state in locals: this is the simulator's hot path. Each
        turn either takes a *decode run* (the batch only decodes and nothing can join it:
        every step up to the next change, i.e. a sequence done, the KV cache full or a step
        starting at until_s, at once in closed form) or one general step (prefill chunks,
        admissions, preemptions)."""
        running, waiting = self.running, self.waiting
        if self.t >= until_s and (running or waiting):
            if not self.lone_formed < until_s < self.t == self.lone_start:
                return True  # already there (the caller advanced the engine just before)
            until_s = self.t + FIRST_STEP_S  # run the woken first step (lone_formed)
        t = self.t
        kv_used = self.kv_used
        busy_s = self.busy_s
        cap, max_seqs = self.cap, self.max_seqs
        kvr, app = self.kv_read_s_per_token, self.attn_s_per_pair
        coeff_cache = self.coeff_cache
        while (running or waiting) and t < until_s:
            n = len(running)
            if not n:  # nothing to decode: the queue's head starts a prefill step
                if t < self.free_s:
                    t = self.free_s
                    if t >= until_s:
                        break
            elif not (
                waiting and n < max_seqs and kv_used + waiting[0][CTX] + waiting[0][PF] <= cap
            ):  # nobody joins: try a decode run
                if n == 1:
                    s = running[0]
                    k = 0 if s[PF] else s[DEC]
                    kv0 = s[CTX]
                else:
                    k = math.inf
                    kv0 = 0
                    for s in running:
                        if s[PF]:
                            k = 0
                            break
                        if s[DEC] < k:
                            k = s[DEC]
                        kv0 += s[CTX]
                    else:
                        room = (cap - kv_used) // n  # steps before the KV cache is full
                        if room < k:
                            k = room
                if k > 1:
                    co = coeff_cache[n]
                    if co is None:  # decode coefficients at zero context (kv0 terms below)
                        co = coeff_cache[n] = decode_coeffs(self.step, n, 0.0)
                    fixed, m0, m1, c0, c1 = co
                    m0 += kvr * kv0
                    c0 += app * kv0
                    if self.jit:  # one multiplier scales every step of the run
                        u = self._jitter()
                        fixed = fixed * u
                        m0 = m0 * u
                        m1 = m1 * u
                        c0 = c0 * u
                        c1 = c1 * u
                    if m0 >= c0 and m1 >= c1:
                        # Memory-bound at every step (small-batch decode): step j takes
                        # p + m1 j, so k steps take one quadratic; inverted here, not in
                        # steps_until, as this is the common case.
                        p = fixed + m0
                        dt = k * p + m1 * k * (k - 1) * 0.5  # all k steps, s
                        left = until_s - t
                        if dt >= left:  # stop at the first step that starts at or after until_s
                            kmax, k = k, _first_reaching(p, m1, left)
                            if k >= kmax:
                                k = kmax
                            else:
                                dt = k * p + m1 * k * (k - 1) * 0.5
                                while dt < left and k < kmax:  # float slack
                                    k += 1
                                    dt = k * p + m1 * k * (k - 1) * 0.5
                                while k > 1:  # step k-1 (0-based) may start at or after it
                                    prev = dt - fixed - (m0 + m1 * (k - 1))
                                    if prev < left:
                                        break
                                    k, dt = k - 1, prev
                    elif until_s != math.inf:
                        k, dt = steps_until(fixed, m0, m1, c0, c1, until_s - t, k)
                    else:
                        dt = steps_time_s(fixed, m0, m1, c0, c1, k)
                    t += dt
                    busy_s += dt
                    kv_used += n * k
                    if n == 1:
                        s[CTX] += k
                        s[KV] += k
                        s[DEC] -= k
                        if not s[DEC]:  # done: retire it here (the common case)
                            self.finish_s[s[RID]] = t
                            kv_used -= s[KV]
                            running.clear()
                        continue
                    done = False
                    for s in running:
                        s[CTX] += k
                        s[KV] += k
                        s[DEC] -= k
                        if not s[DEC]:
                            done = True
                    if done:
                        kv_used = self._retire(t, kv_used)
                    continue
            t, busy_s, kv_used = self._one_step(t, busy_s, kv_used)
        self.t = t
        self.kv_used = kv_used
        self.busy_s = busy_s
        if not running and not waiting:
            self.general = False
            self.free_s = t
            return False
        return True

    def _jitter(self) -> float:
        """The next step-time multiplier of this engine (drawn in seeded blocks)."""
        if self.jit_i >= len(self.jit_draws):
            self.jit_blocks += 1
            self.jit_draws = jitter_block(self.jit_cv, self.jit_blocks).tolist()
            self.jit_i = 0
        self.jit_i += 1
        return self.jit_draws[self.jit_i - 1]

    def _retire(self, t: float, kv_used: int) -> int:
        """Finish the sequences with nothing left at `t`; the KV tokens still held."""
        keep = []
        for s in self.running:
            if s[DEC] == 0 and s[PF] == 0:
                self.finish_s[s[RID]] = t
                kv_used -= s[KV]
            else:
                keep.append(s)
        self.running[:] = keep
        return kv_used

    def _one_step(self, t: float, busy_s: float, kv_used: int) -> tuple[float, float, int]:
        """One engine step from `t`: (t, busy_s, kv_used) after it."""
        running, waiting = self.running, self.waiting
        n_run = len(running)
        max_seqs = self.max_seqs
        cap = self.cap
        # Preempt (recompute) the newest sequences until this step's decode tokens fit
        # (n_run bounds the decode tokens: most steps are far from the KV limit).
        if n_run > 1 and kv_used + n_run > cap:
            n_dec = sum(1 for s in running if not s[PF])
            while n_run > 1 and kv_used + n_dec > cap:
                v = running.pop()
                n_run -= 1
                kv_used -= v[KV]
                if not v[PF]:
                    n_dec -= 1
                v[PF] = v[CTX] + v[PF]  # recompute everything it had
                v[CTX] = 0
                v[KV] = 0
                waiting.appendleft(v)
                self.preemptions += 1
        budget = self.budget
        new = kv = pairs = 0.0
        dec: list[list] = []  # decoding sequences in this step (one token each)
        chunks: list[tuple[list, int]] = []  # prefill chunks in this step
        for s in running:
            if budget <= 0:
                break
            if s[PF]:
                c = s[PF] if s[PF] < budget else budget
                chunks.append((s, c))
                pairs += c * (s[CTX] + (c + 1) / 2)
            else:
                c = 1
                dec.append(s)
                pairs += s[CTX] + 1.0  # one new token: (c + 1) / 2 = 1
            budget -= c
            new += c
            kv += s[CTX]
        while budget > 0 and waiting and n_run < max_seqs:
            s = waiting[0]
            need = s[CTX] + s[PF]
            if n_run and kv_used + need > cap:
                break
            waiting.popleft()
            s[KV] = need
            kv_used += need
            running.append(s)
            n_run += 1
            c = s[PF] if s[PF] < budget else budget
            chunks.append((s, c))
            budget -= c
            new += c
            kv += s[CTX]
            pairs += c * (s[CTX] + (c + 1) / 2)
        if not new:
            return t, busy_s, kv_used
        st = self.step
        if self.dense:  # StepModel.time_s without its MoE and TP terms (both zero here)
            mem = st.dense_weight_read_s + st.kv_read_s_per_token * kv
            comp = st.compute_s_per_token * new + st.attn_s_per_pair * pairs
            dt = st.fixed_s(new) + st.seq_s * (len(dec) + len(chunks))
            dt += mem if mem > comp else comp
        else:
            dt = st.time_s(new, kv, pairs, len(dec) + len(chunks))
        if self.jit:
            dt *= self._jitter()
        t += dt
        busy_s += dt
        finished = False
        for s in dec:
            s[CTX] += 1
            s[KV] += 1
            s[DEC] -= 1
            if not s[DEC]:
                finished = True
        kv_used += len(dec)
        for s, c in chunks:
            s[CTX] += c
            s[PF] -= c
            if not s[PF]:
                if s[EMITTED]:
                    s[DEC] -= 1  # a recomputed prompt yields the next token
                else:
                    s[EMITTED] = 1
                    self.first_s[s[RID]] = t
                if not s[DEC]:
                    finished = True
        if finished:
            kv_used = self._retire(t, kv_used)
        return t, busy_s, kv_used
