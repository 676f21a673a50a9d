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

Step-time jitter (`InstancePerf.step_jitter_cv` > 0; off by default, and then nothing here
changes): real steps vary (other processes, clocks, allocator). Multipliers of mean 1 and
that coefficient of variation (lognormal), drawn from a seeded generator, scale a lone
request's prefill and its decode (one each, by its position in the trace), each general
step, and each run of decode steps (one for the run: a slow stretch, as the profiler's
per-request spreads measure it). Deterministic: the same trace gives the same times; the
compiled engine (`kernel`) draws the same multipliers in the same order.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from planner.optimizer.perf.types import InstancePerf, StepModel

# A sequence in the engine: [request id, context tokens computed, prefill tokens left,
# decode tokens left, KV tokens held, first token already emitted (0/1)].
RID, CTX, PF, DEC, KV, EMITTED = range(6)


def _comm_s(step: StepModel, new_tokens: float) -> float:
    """TP all-reduce time of a step, s (0 without TP)."""
    return step.comm_latency_s + step.comm_s_per_token * new_tokens if step.comm_latency_s else 0.0


def decode_coeffs(step: StepModel, n: int, kv0: float) -> tuple[float, float, float, float, float]:
    """Decode step j of n sequences holding kv0 context tokens takes
    fixed + max(m0 + m1 j, c0 + c1 j) seconds (memory side, compute side)."""
    fixed = step.fixed_s(n) + _comm_s(step, n)  # s per step
    m0 = step.dense_weight_read_s + step.expert_read_s * step.experts_touched(n)
    m0 += step.kv_read_s_per_token * kv0  # s: context KV read
    m1 = step.kv_read_s_per_token * n  # s per step: context grows by n tokens
    c0 = step.compute_s_per_token * n + step.attn_s_per_pair * (kv0 + n)  # s
    c1 = step.attn_s_per_pair * n  # s per step
    return fixed, m0, m1, c0, c1


def steps_time_s(fixed: float, m0: float, m1: float, c0: float, c1: float, k: int) -> float:
    """Time of decode steps 0..k-1 with step j taking fixed + max(m0 + m1 j, c0 + c1 j), s."""
    if k <= 0:
        return 0.0
    d1 = m1 - c1
    mem_first = m0 >= c0
    if d1 != 0:
        s = math.ceil((c0 - m0) / d1)  # first step on the other side of the crossing
        if 0 < s < k:
            if d1 > 0:  # compute-bound first, memory-bound after
                a0, a1, b0, b1 = c0, c1, m0 + m1 * s, m1
            else:
                a0, a1, b0, b1 = m0, m1, c0 + c1 * s, c1
            r = k - s
            return k * fixed + s * a0 + a1 * s * (s - 1) * 0.5 + r * b0 + b1 * r * (r - 1) * 0.5
        mem_first = (d1 > 0) == (s <= 0)  # one regime over all k steps
    if mem_first:
        return k * (fixed + m0) + m1 * k * (k - 1) * 0.5
    return k * (fixed + c0) + c1 * k * (k - 1) * 0.5


def _first_reaching(p: float, a1: float, r: float) -> int:
    """Smallest k >= 1 with k p + a1 k (k-1) / 2 >= r (steps of time p + a1 j)."""
    a = a1 / 2
    b = p - a
    if a <= 1e-300:
        k = math.ceil(r / p) if p > 0 else 1
    else:
        k = math.ceil((-b + math.sqrt(b * b + 4 * a * r)) / (2 * a))
    return k if k > 1 else 1


def steps_until(
    fixed: float, m0: float, m1: float, c0: float, c1: float, dt: float, kmax: int
) -> tuple[int, float]:
    """(k, time of k steps): the smallest k <= kmax whose k steps take >= dt (kmax if none),
    i.e. the steps that start within dt. Piecewise-quadratic inversion, checked exactly.
    (`Engine.advance_to` handles the memory-bound case, one quadratic, itself.)"""
    t_max = steps_time_s(fixed, m0, m1, c0, c1, kmax)
    if t_max < dt:
        return kmax, t_max
    d0, d1 = m0 - c0, m1 - c1
    if d1 == 0:
        a0, a1 = (m0, m1) if d0 >= 0 else (c0, c1)
        k = _first_reaching(fixed + a0, a1, dt)
    else:
        s = min(max(math.ceil(-d0 / d1), 0), kmax)
        (a0, a1), (b0, b1) = ((c0, c1), (m0, m1)) if d1 > 0 else ((m0, m1), (c0, c1))
        t_s = s * fixed + s * a0 + a1 * s * (s - 1) * 0.5
        if dt <= t_s:
            k = _first_reaching(fixed + a0, a1, dt)
        else:
            k = s + _first_reaching(fixed + b0 + b1 * s, b1, dt - t_s)
    if k >= kmax:
        k, t_k = kmax, t_max
    else:
        t_k = steps_time_s(fixed, m0, m1, c0, c1, k)
        while t_k < dt and k < kmax:  # float slack
            k += 1
            t_k = steps_time_s(fixed, m0, m1, c0, c1, k)
    while k > 1:  # step k-1 (0-based) takes fixed + max(mem, compute)
        j = k - 1
        mem, comp = m0 + m1 * j, c0 + c1 * j
        t_prev = t_k - fixed - (mem if mem > comp else comp)
        if t_prev < dt:
            break
        k, t_k = j, t_prev
    return k, t_k


def decode_time_s(step: StepModel, n: int, kv0: float, k: int) -> float:
    """Wall time of k decode steps of n sequences starting with kv0 context tokens, s."""
    return steps_time_s(*decode_coeffs(step, n, kv0), k)


def _lin_v(a0: np.ndarray, a1: np.ndarray, k: np.ndarray) -> np.ndarray:
    return k * a0 + a1 * k * (k - 1) / 2


def decode_time_vec(step: StepModel, kv0: np.ndarray, k: np.ndarray) -> np.ndarray:
    """`decode_time_s` for one sequence (n=1), vectorized over kv0 and k."""
    fixed, _, m1, _, c1 = decode_coeffs(step, 1, 0.0)
    m0 = step.dense_weight_read_s + step.expert_read_s * step.experts_touched(1)
    m0 = m0 + step.kv_read_s_per_token * kv0
    c0 = step.compute_s_per_token + step.attn_s_per_pair * (kv0 + 1)
    d0, d1 = m0 - c0, m1 - c1
    k = k.astype(np.float64)
    if d1 == 0:
        body = np.where(d0 >= 0, _lin_v(m0, m1, k), _lin_v(c0, c1, k))
    else:
        s = np.clip(np.ceil(-d0 / d1), 0, k)
        if d1 > 0:
            body = _lin_v(c0, c1, s) + _lin_v(m0 + m1 * s, m1, k - s)
        else:
            body = _lin_v(m0, m1, s) + _lin_v(c0 + c1 * s, c1, k - s)
    return np.where(k > 0, k * fixed + body, 0.0)


def step_time_vec(
    step: StepModel, new: np.ndarray, kv: np.ndarray, pairs: np.ndarray
) -> np.ndarray:
    """`StepModel.time_s` vectorized (new_tokens > 0 everywhere)."""
    mem = step.dense_weight_read_s + step.kv_read_s_per_token * kv
    if step.num_experts:
        miss = (1.0 - step.experts_per_tok / step.num_experts) ** new
        mem = mem + step.expert_read_s * step.num_experts * (1.0 - miss)
    comp = step.compute_s_per_token * new + step.attn_s_per_pair * pairs
    comm = step.comm_latency_s + step.comm_s_per_token * new if step.comm_latency_s else 0.0
    fixed = step.overhead_s + np.where(new > step.graph_max_tokens, step.eager_s, 0.0)
    return fixed + np.maximum(mem, comp) + comm


JITTER_SEED = 0  # step-time jitter is deterministic: one fixed seed per engine and per trace
JITTER_BLOCK = 4096  # multipliers an engine draws at a time


def jitter(cv: float, n: int, seed: int) -> np.ndarray:
    """`n` lognormal multipliers of mean 1 and coefficient of variation `cv`."""
    sigma2 = math.log1p(cv * cv)
    rng = np.random.default_rng(seed)
    return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), n)


def jitter_block(cv: float, blocks: int) -> np.ndarray:
    """An engine's `blocks`-th block of step-time multipliers (1-based; both engines)."""
    return jitter(cv, JITTER_BLOCK, JITTER_SEED * 1_000_003 + blocks)


def lone_times(
    perf: InstancePerf,
    input_tokens: np.ndarray,
    cached_tokens: np.ndarray,
    output_tokens: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(time to first token, time to last token) of requests each alone on an empty engine, s.

    The prompt runs in chunks of `chunk_tokens` (the cached prefix is skipped but read as
    context), the first token comes with the last chunk, then output-1 decode steps.
    """
    step = perf.step
    budget = float(max(perf.chunk_tokens, 1))
    ctx = cached_tokens.astype(np.float64)
    left = (input_tokens - cached_tokens).astype(np.float64)
    # The first chunk over every request, the rest only over the few long prompts (masks
    # over the whole trace at every chunk were most of the time); the same sums per request.
    new = np.minimum(left, budget)
    pf = np.where(left > 0, step_time_vec(step, new, ctx, new * (ctx + (new + 1) / 2)), 0.0)
    more = np.flatnonzero(left > budget)
    ctx, left = ctx[more] + budget, left[more] - budget
    part = pf[more]
    while len(left):
        new = np.minimum(left, budget)
        part += step_time_vec(step, new, ctx, new * (ctx + (new + 1) / 2))
        ctx += new
        left -= new
        keep = left > 0
        pf[more] = part
        more, ctx, left, part = more[keep], ctx[keep], left[keep], part[keep]
    dec = decode_time_vec(step, input_tokens.astype(np.float64), output_tokens - 1)
    if perf.step_jitter_cv > 0:
        mult = jitter(perf.step_jitter_cv, 2 * len(pf), seed=JITTER_SEED).reshape(2, -1)
        pf, dec = pf * mult[0], dec * mult[1]
    return pf, pf + dec


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
        "lone_start",
        "lone_until",
        "max_seqs",
        "preemptions",
        "running",
        "step",
        "t",
        "waiting",
    )

    def __init__(self, perf: InstancePerf, first_s: np.ndarray, finish_s: np.ndarray):
        self.step = perf.step
        self.dense = not perf.step.num_experts and not perf.step.comm_latency_s
        self.jit = perf.step_jitter_cv > 0  # step-time jitter on (see the module docstring)
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
        self.lone_until = -math.inf
        self.lone_dur = 0.0
        self.free_s = -math.inf  # earliest start of the next step
        self.t = 0.0
        self.running: list[list] = []
        self.waiting: deque[list] = deque()
        self.kv_used = 0
        self.busy_s = 0.0  # time with a step running, s
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
                if self.t < t_s:
                    self.advance_to(t_s)
                if self.general:
                    self.enqueue(rid, inp, cached, out)
                    return
            if self.lone < 0 or self.lone_until <= t_s:
                start = t_s if t_s > self.free_s else self.free_s
                self.lone = rid
                self.lone_args = (inp, cached, out)
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
            return True  # already there (the caller advanced the engine just before)
        t, kv_used, busy_s = self.t, self.kv_used, self.busy_s
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
                        fixed, m0, m1, c0, c1 = fixed * u, m0 * u, m1 * u, c0 * u, c1 * u
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
        self.t, self.kv_used, self.busy_s = t, kv_used, busy_s
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
        n_run, max_seqs, cap = len(running), self.max_seqs, self.cap
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
            dt = st.fixed_s(new) + (mem if mem > comp else comp)
        else:
            dt = st.time_s(new, kv, pairs)
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
