"""The closed loop: `clients` users, each sending its next request when the last one ends.

A serving benchmark (`vllm bench serve --max-concurrency C --request-rate inf`) and a team's
agents calling a model in a loop both look like this. The engine is simulated step by step
as vLLM V1 schedules it, with the step times of the perf model (`StepModel.time_s`):

- each step has a token budget (`chunk_tokens`, vLLM's max_num_batched_tokens); running
  sequences are served first, in admission order (one token per decoding sequence, the next
  chunk of a prompt being prefilled), then waiting requests are admitted in arrival order
  while the batch has room (`max_num_seqs`), the budget has tokens and the KV cache holds
  the chunk; a request's first token comes with the step that computes its last prompt token;
- KV is allocated as tokens are computed; when a step's decode tokens do not fit, the newest
  sequences are preempted and later recompute their prompt and the tokens generated so far
  (queueing appears only when the KV cache or max_num_seqs cannot hold every client);
- a request reaches the engine `prefill_overhead_s` after it is sent (HTTP, tokenization),
  so it waits for the step running then: its TTFT counts that overhead, that wait and every
  step it prefills in (shared with the other clients' decodes and prefills); its TPOT counts
  every step it decodes in, including those that carry other clients' prompts.

Clients that finish together send together, so requests move in groups of identical ones.
Decoding groups are kept by the step they started decoding at (their context and tokens
left follow from the step counter) in a heap ordered by the step they finish at, so a step
costs the same whatever the number of clients, and stretches of decode-only steps run in
closed form. Decode tokens always fit the step's budget (vLLM's budgets exceed its batch
caps). Pure: numbers in, numbers out.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from planner.optimizer.perf.types import InstancePerf

# A group of identical requests: [count, context tokens computed, prompt tokens left, tokens
# left to generate after the first, time sent, time of its first token (nan before), the
# client round it belongs to (0: each client's first request), admission order,
# decode-start step]. A decoding group's context and tokens left are its values at its
# decode-start step; the step counter gives the rest.
N, CTX, PF, DEC, SENT, FIRST, ROUND, ORDER, START = range(9)


@dataclass(frozen=True)
class LoopResult:
    """Means over the requests counted (see `closed_loop`)."""

    ttft_s: float  # mean time to first token as the client sees it, s
    tpot_s: float  # mean time per output token after the first, s
    tokens_per_s: float  # output tokens per second of all clients together
    mean_batch: float  # sequences in a step, time-weighted mean
    preemptions: int  # sequences preempted because the KV cache was full


def decode_run_s(fixed: float, m0: float, m1: float, c0: float, c1: float, k: int) -> float:
    """Time of decode steps 0..k-1 where step j takes fixed + max(m0 + m1 j, c0 + c1 j), s."""
    if k <= 0:
        return 0.0
    d0, d1 = m0 - c0, m1 - c1  # memory minus compute side, linear in j: one crossing at most
    if d1 == 0 or (d0 >= 0) == (d0 + d1 * (k - 1) >= 0):
        s = k
    else:
        s = min(k, max(0, math.ceil(-d0 / d1)))
    a0, a1, b0, b1 = (m0, m1, c0, c1) if d0 >= 0 else (c0, c1, m0, m1)
    r = k - s
    head = s * a0 + a1 * s * (s - 1) / 2  # steps 0..s-1 on the side larger at step 0
    tail = r * (b0 + b1 * s) + b1 * r * (r - 1) / 2  # steps s..k-1 on the other
    return k * fixed + head + tail


def _steps_starting_before(coeffs: tuple[float, ...], dt: float, kmax: int) -> int:
    """How many of the next kmax decode steps start before `dt` from now (at least one)."""
    if decode_run_s(*coeffs, kmax - 1) < dt:
        return kmax
    lo, hi = 1, kmax - 1  # the first k whose k steps take >= dt
    while lo < hi:
        mid = (lo + hi) // 2
        if decode_run_s(*coeffs, mid) < dt:
            lo = mid + 1
        else:
            hi = mid
    return lo


class _Loop:
    """State of one closed-loop simulation (see the module docstring)."""

    def __init__(self, perf: InstancePerf, inp: int, out: int, clients: int, rounds: int):
        self.step = perf.step
        self.inp, self.out = inp, out
        self.cap = max(int(perf.max_kv_tokens), 1)  # KV tokens, all sequences
        self.max_seqs = max(int(perf.max_num_seqs), 1)
        self.budget = max(int(perf.chunk_tokens), 1)  # tokens per step
        self.delay = perf.prefill_overhead_s  # sent -> at the engine, s
        self.left = clients * rounds - clients  # requests to send after the first ones
        self.arrivals: list[list] = []  # sent, not yet at the engine, by time
        self.waiting: list[list] = []  # at the engine, not admitted, in arrival order
        self.prefilling: list[list] = []  # admitted, prompt not done, in admission order
        self.decoding: dict[int, list] = {}  # ORDER -> group
        self.finish_heap: list[tuple[int, int]] = []  # (step it finishes at, ORDER)
        self.n_dec = 0  # sequences decoding
        self.kv_dec = 0  # KV tokens the decoding sequences hold
        self.steps = 0  # steps run
        self.order = 0
        self.t = 0.0
        self.seq_time = 0.0  # sum over steps of sequences x step time
        self.preemptions = 0
        self.done: list[tuple[int, float, float, int]] = []  # (count, TTFT, TPOT, round)
        self._send(clients, 0.0, 0)

    # -- groups -----------------------------------------------------------------------------
    def _send(self, n: int, t: float, rnd: int) -> None:
        self.arrivals.append([n, 0, self.inp, self.out - 1, t, math.nan, rnd, -1, 0])

    def _ctx(self, g: list) -> int:
        return g[CTX] + self.steps - g[START]

    def _start_decoding(self, g: list) -> None:
        g[START] = self.steps
        if g[DEC] <= 0:
            self._finish(g)
            return
        self.decoding[g[ORDER]] = g
        heapq.heappush(self.finish_heap, (self.steps + g[DEC], g[ORDER]))
        self.n_dec += g[N]
        self.kv_dec += g[N] * g[CTX]

    def _finish(self, g: list) -> None:
        """Group `g` produced its last token now: record it; its clients send again."""
        tpot = (self.t - g[FIRST]) / (self.out - 1) if self.out > 1 else 0.0
        self.done.append((g[N], g[FIRST] - g[SENT], tpot, g[ROUND]))
        m = min(g[N], self.left)
        if m > 0:
            self.left -= m
            self._send(m, self.t, g[ROUND] + 1)

    def _retire(self) -> None:
        """Finish the decoding groups whose last token came with the step just run."""
        heap = self.finish_heap
        while heap and heap[0][0] <= self.steps:
            _, order = heapq.heappop(heap)
            g = self.decoding.pop(order, None)
            if g is None or g[START] + g[DEC] != self.steps:
                if g is not None:  # a stale entry of a group still decoding
                    self.decoding[order] = g
                continue
            self.n_dec -= g[N]
            self.kv_dec -= g[N] * self._ctx(g)
            self._finish(g)

    def _arrive(self) -> None:
        while self.arrivals and self.arrivals[0][SENT] + self.delay <= self.t:
            self.waiting.append(self.arrivals.pop(0))

    def _preempt(self, need: int) -> None:
        """Free `need` KV tokens: preempt the newest sequences (they recompute later)."""
        while need > 0:
            cands = [*self.decoding.values(), *self.prefilling]
            if len(cands) <= 1 and sum(g[N] for g in cands) <= 1:
                return  # a lone sequence is never preempted (vLLM would fail it instead)
            g = max(cands, key=lambda x: x[ORDER])
            decoding = g[ORDER] in self.decoding
            ctx = self._ctx(g) if decoding else g[CTX]
            m = min(g[N], max(1, math.ceil(need / max(ctx, 1))))
            left = g[DEC] - (self.steps - g[START]) if decoding else g[DEC]
            back = [m, 0, ctx + g[PF], left, g[SENT], g[FIRST], g[ROUND], -1, 0]
            if decoding:
                self.n_dec -= m
                self.kv_dec -= m * ctx
            g[N] -= m
            if not g[N]:
                (self.decoding.pop(g[ORDER]) if decoding else self.prefilling.remove(g))
            self.waiting.insert(0, back)
            self.preemptions += m
            need -= m * ctx

    # -- one general step -------------------------------------------------------------------
    def general_step(self) -> None:
        """One engine step from `self.t`: schedule, time it, advance every scheduled group."""
        kv = self.kv_dec + sum(g[N] * g[CTX] for g in self.prefilling)
        if kv + self.n_dec > self.cap:
            self._preempt(kv + self.n_dec - self.cap)
            kv = self.kv_dec + sum(g[N] * g[CTX] for g in self.prefilling)
        budget = self.budget - self.n_dec
        new, ctx_read, pairs = float(self.n_dec), float(self.kv_dec), float(self.kv_dec)
        chunks: list[tuple[list, int]] = []
        kv += self.n_dec
        running = self.n_dec + sum(g[N] for g in self.prefilling)
        queue = self.prefilling
        self.prefilling = []
        for g in queue:  # prompts already admitted continue first, in admission order
            full = min(g[N], max(budget, 0) // g[PF])  # members whose prompt completes now
            pieces = [(g if full == g[N] else [full, *g[1:]], g[PF])] if full else []
            budget -= full * g[PF]
            if full < g[N] and budget > 0:  # one member takes what the budget leaves
                pieces.append(([1, *g[1:]], budget))
                budget = 0
            rest = g[N] - sum(h[N] for h, _ in pieces)
            chunks += pieces
            self.prefilling += [h for h, _ in pieces]
            if rest:
                self.prefilling.append(g if not pieces else [rest, *g[1:]])
        while budget > 0 and self.waiting and running < self.max_seqs:
            g = self.waiting[0]
            per = min(g[PF], budget)
            if kv + per > self.cap:
                break
            full = min(self.max_seqs - running, g[N], budget // g[PF], (self.cap - kv) // g[PF])
            h = [full if full >= 1 else 1, *g[1:]]
            c = g[PF] if full >= 1 else per
            h[ORDER] = self.order
            self.order += 1
            if h[N] == g[N]:
                self.waiting.pop(0)
            else:
                g[N] -= h[N]
            self.prefilling.append(h)
            chunks.append((h, c))
            running += h[N]
            kv += h[N] * c
            budget -= h[N] * c
        for h, c in chunks:
            new += h[N] * c
            ctx_read += h[N] * h[CTX]
            pairs += h[N] * c * (h[CTX] + (c + 1) / 2)  # causal: prefix + earlier chunk tokens
        if not new:  # nothing to run: wait for the next arrival
            self.t = self.arrivals[0][SENT] + self.delay if self.arrivals else math.inf
            return
        dt = self.step.time_s(new, ctx_read + new, pairs)
        self.t += dt
        self.seq_time += running * dt
        self.steps += 1
        self.kv_dec += self.n_dec
        for h, c in chunks:
            h[CTX] += c
            h[PF] -= c
        self._retire()
        still = []
        for h in self.prefilling:
            if h[PF]:
                still.append(h)
                continue
            if math.isnan(h[FIRST]):
                h[FIRST] = self.t
            else:
                h[DEC] -= 1  # a recomputed prompt yields the next token
            self._start_decoding(h)
        self.prefilling = still

    # -- a stretch of decode-only steps -------------------------------------------------------
    def decode_run(self) -> bool:
        """Run decode-only steps up to the next change, in closed form; False if none apply."""
        n = self.n_dec
        if not n or self.prefilling:
            return False
        kv = self.kv_dec
        room = self.budget - n  # prompt tokens the next step could take
        joins = self.waiting and room > 0 and n < self.max_seqs
        if joins and kv + n + min(self.waiting[0][PF], room) <= self.cap:
            return False  # someone joins at the next step
        k = self.finish_heap[0][0] - self.steps  # steps until a group is done
        k = min(k, (self.cap - kv) // n)  # steps before the KV cache is full
        if k < 2:
            return False
        st = self.step
        fixed = st.overhead_s + (
            st.comm_latency_s + st.comm_s_per_token * n if st.comm_latency_s else 0.0
        )
        m0 = st.dense_weight_read_s + st.expert_read_s * st.experts_touched(n)
        m0 += st.kv_read_s_per_token * (kv + n)
        m1 = st.kv_read_s_per_token * n  # the context grows by n tokens a step
        c0 = st.compute_s_per_token * n + st.attn_s_per_pair * (kv + n)
        c1 = st.attn_s_per_pair * n
        co = (fixed, m0, m1, c0, c1)
        if self.arrivals:
            due = self.arrivals[0][SENT] + self.delay - self.t
            if due <= 0:
                return False
            k = _steps_starting_before(co, due, k)
        dt = decode_run_s(*co, k)
        self.t += dt
        self.seq_time += n * dt
        self.steps += k
        self.kv_dec += n * k
        self._retire()
        return True

    def run(self) -> None:
        while self.arrivals or self.waiting or self.prefilling or self.n_dec:
            self._arrive()
            if not (self.waiting or self.prefilling or self.n_dec):
                self.t = max(self.t, self.arrivals[0][SENT] + self.delay)
                continue
            if not self.decode_run():
                self.general_step()
            if not math.isfinite(self.t):
                break


def closed_loop(
    perf: InstancePerf,
    input_len: int,
    output_len: int,
    clients: int,
    *,
    rounds: int = 5,
    warmup_rounds: int = 0,
) -> LoopResult:
    """Means over the requests of `clients` clients sending `rounds` requests each, back to
    back, all starting at time 0 (the first round meets an empty engine together).

    The first `warmup_rounds` requests of every client are left out of the means (a
    benchmark's warm-up requests; the steady state). A request that cannot fit the KV cache
    gives infinite times.
    """
    input_len, output_len = max(1, int(input_len)), max(1, int(output_len))
    clients, rounds = max(1, int(clients)), max(1, int(rounds))
    if perf.max_kv_tokens < input_len + output_len:
        return LoopResult(math.inf, math.inf, 0.0, 0.0, 0)
    loop = _Loop(perf, input_len, output_len, clients, rounds)
    loop.run()
    use = [d for d in loop.done if d[3] >= min(warmup_rounds, rounds - 1)]
    n = sum(d[0] for d in use)
    if not n or not math.isfinite(loop.t) or loop.t <= 0:
        return LoopResult(math.inf, math.inf, 0.0, 0.0, loop.preemptions)
    total = sum(d[0] for d in loop.done)
    return LoopResult(
        ttft_s=sum(d[0] * d[1] for d in use) / n,
        tpot_s=sum(d[0] * d[2] for d in use) / n,
        tokens_per_s=total * output_len / loop.t,
        mean_batch=loop.seq_time / loop.t,
        preemptions=loop.preemptions,
    )


# The steady state: each client's first request (all arriving together at an empty engine)
# is a warm-up; three more per client are averaged.
STEADY_ROUNDS = 4
STEADY_WARMUP_ROUNDS = 1


def steady_state(
    perf: InstancePerf,
    input_len: int,
    output_len: int,
    concurrency: int,
    *,
    rounds: int = STEADY_ROUNDS,
    warmup_rounds: int = STEADY_WARMUP_ROUNDS,
) -> tuple[float, float, float]:
    """(mean TTFT s, mean TPOT s, output tokens/s) of `concurrency` clients sending requests
    of `input_len` prompt and `output_len` output tokens back to back (see `closed_loop`).

    A request that cannot fit the KV cache gives (inf, inf, 0).
    """
    r = closed_loop(
        perf, input_len, output_len, concurrency, rounds=rounds, warmup_rounds=warmup_rounds
    )
    return r.ttft_s, r.tpot_s, r.tokens_per_s
