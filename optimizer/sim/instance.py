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
    decode_coeffs,
    decode_run,
    jitter_block,
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
        while (running or waiting) and t < until_s:
            n = len(running)
            if not n:  # nothing to decode: the queue's head starts a prefill step
                if t < self.free_s:
                    t = self.free_s
                    if t >= until_s:
                        break
            elif not (
                waiting and n < max_seqs and kv_used + waiting[0][CTX] + waiting[0][PF] <= cap
            ):  # nobody joins: a decode run where every sequence decodes for 2+ steps
                k, kv0 = self._decode_run_length(kv_used)
                if k > 1:
                    k, dt = decode_run(*self._decode_run_coeffs(n, kv0), k, until_s - t)
                    t += dt
                    busy_s += dt
                    kv_used = self._decode_run_done(t, k, kv_used)
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

    def _decode_run_length(self, kv_used: int) -> tuple[int, int]:
        """(k, kv0): the decode steps the batch can take at once (0 while a sequence still
        prefills; else until the first sequence is done or, for a batch, the KV cache is
        full) and the context tokens it starts with."""
        running = self.running
        n = len(running)
        if n == 1:
            s = running[0]
            return (0 if s[PF] else s[DEC]), s[CTX]
        k = math.inf
        kv0 = 0
        for s in running:
            if s[PF]:
                return 0, kv0
            if s[DEC] < k:
                k = s[DEC]
            kv0 += s[CTX]
        room = (self.cap - kv_used) // n  # steps before the KV cache is full
        if room < k:
            k = room
        return int(k), kv0  # finite: `running` holds a sequence

    def _decode_run_coeffs(self, n: int, kv0: int) -> tuple[float, float, float, float, float]:
        """`decode_coeffs` of n sequences holding kv0 context tokens, scaled by one jitter
        multiplier for the whole run."""
        co = self.coeff_cache[n]
        if co is None:  # decode coefficients at zero context (kv0 terms below)
            co = self.coeff_cache[n] = decode_coeffs(self.step, n, 0.0)
        fixed, m0, m1, c0, c1 = co
        m0 += self.kv_read_s_per_token * kv0
        c0 += self.attn_s_per_pair * kv0
        if self.jit:  # one multiplier scales every step of the run
            u = self._jitter()
            fixed = fixed * u
            m0 = m0 * u
            m1 = m1 * u
            c0 = c0 * u
            c1 = c1 * u
        return fixed, m0, m1, c0, c1

    def _decode_run_done(self, t: float, k: int, kv_used: int) -> int:
        """Every running sequence took `k` decode tokens by `t`; retires those done and
        returns the KV tokens held."""
        running = self.running
        kv_used += len(running) * k
        if len(running) == 1:
            s = running[0]
            s[CTX] += k
            s[KV] += k
            s[DEC] -= k
            if not s[DEC]:  # done: retire it here (the common case)
                self.finish_s[s[RID]] = t
                kv_used -= s[KV]
                running.clear()
            return kv_used
        done = False
        for s in running:
            s[CTX] += k
            s[KV] += k
            s[DEC] -= k
            if not s[DEC]:
                done = True
        if done:
            kv_used = self._retire(t, kv_used)
        return kv_used

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
        # Preempt (recompute) the newest sequences until this step's decode tokens fit
        # (the batch size bounds the decode tokens: most steps are far from the KV limit).
        if len(self.running) > 1 and kv_used + len(self.running) > self.cap:
            kv_used = self._preempt(kv_used)
        dec, chunks, kv_used, new, kv, pairs = self._form_batch(kv_used)
        if not new:
            return t, busy_s, kv_used
        dt = self._step_time_s(new, kv, pairs, len(dec) + len(chunks))
        t += dt
        busy_s += dt
        kv_used = self._step_done(t, dec, chunks, kv_used)
        return t, busy_s, kv_used

    def _preempt(self, kv_used: int) -> int:
        """Send the newest sequences back to the queue's front, to recompute everything they
        had, until the decode tokens of the next step fit; the KV tokens still held."""
        running = self.running
        n_dec = sum(1 for s in running if not s[PF])
        while len(running) > 1 and kv_used + n_dec > self.cap:
            v = running.pop()
            kv_used -= v[KV]
            if not v[PF]:
                n_dec -= 1
            v[PF] = v[CTX] + v[PF]  # recompute everything it had
            v[CTX] = 0
            v[KV] = 0
            self.waiting.appendleft(v)
            self.preemptions += 1
        return kv_used

    def _form_batch(
        self, kv_used: int
    ) -> tuple[list[list], list[tuple[list, int]], int, float, float, float]:
        """This step's work within the token budget: running sequences first (one token for
        a decoding one, the next prefill chunk for a prefilling one), then the queue's head
        while the batch and the KV cache have room. (decoding sequences, prefill chunks,
        KV tokens held, new tokens, context tokens read, attention pairs)."""
        running, waiting = self.running, self.waiting
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
        while budget > 0 and waiting and len(running) < self.max_seqs:
            s = waiting[0]
            need = s[CTX] + s[PF]
            if running and kv_used + need > self.cap:
                break
            waiting.popleft()
            s[KV] = need
            kv_used += need
            running.append(s)
            c = s[PF] if s[PF] < budget else budget
            chunks.append((s, c))
            budget -= c
            new += c
            kv += s[CTX]
            pairs += c * (s[CTX] + (c + 1) / 2)
        return dec, chunks, kv_used, new, kv, pairs

    def _step_time_s(self, new: float, kv: float, pairs: float, seqs: int) -> float:
        """The time of one step, jitter included, s."""
        st = self.step
        if self.dense:  # StepModel.time_s without its MoE and TP terms (both zero here)
            mem = st.dense_weight_read_s + st.kv_read_s_per_token * kv
            comp = st.compute_s_per_token * new + st.attn_s_per_pair * pairs
            dt = st.fixed_s(new) + st.seq_s * seqs
            dt += mem if mem > comp else comp
        else:
            dt = st.time_s(new, kv, pairs, seqs)
        if self.jit:
            dt *= self._jitter()
        return dt

    def _step_done(
        self, t: float, dec: list[list], chunks: list[tuple[list, int]], kv_used: int
    ) -> int:
        """The step's tokens are computed at `t`: a prompt done emits its first token; the
        sequences with nothing left retire. The KV tokens held after it."""
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
        return kv_used
