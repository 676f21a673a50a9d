"""Step times of one vLLM engine in closed form: decode runs, prefill chunks, requests alone on
an empty engine, and the seeded step-time jitter. The engine (`instance.Engine`) and its
compiled twin (`kernel`) take their step times from here.

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

import numpy as np

from planner.optimizer.perf.types import InstancePerf, StepModel


def _comm_s(step: StepModel, new_tokens: float) -> float:
    """TP all-reduce time of a step, s (0 without TP)."""
    return step.comm_latency_s + step.comm_s_per_token * new_tokens if step.comm_latency_s else 0.0


def decode_coeffs(step: StepModel, n: int, kv0: float) -> tuple[float, float, float, float, float]:
    """Decode step j of n sequences holding kv0 context tokens takes
    fixed + max(m0 + m1 j, c0 + c1 j) seconds (memory side, compute side)."""
    fixed = step.fixed_s(n) + step.seq_s * n + _comm_s(step, n)  # s per step
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
                a0 = c0
                a1 = c1
                b0 = m0 + m1 * s
                b1 = m1
            else:
                a0 = m0
                a1 = m1
                b0 = c0 + c1 * s
                b1 = c1
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
    (`decode_run` inverts the memory-bound case, one quadratic, itself.)"""
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


def _memory_bound_run(
    fixed: float, m0: float, m1: float, k: int, left_s: float
) -> tuple[int, float]:
    """`decode_run` when every step is memory-bound (small-batch decode): step j takes
    p + m1 j, so k steps take one quadratic; inverted here, not in `steps_until`, as this is
    the common case."""
    p = fixed + m0
    dt = k * p + m1 * k * (k - 1) * 0.5  # all k steps, s
    if dt < left_s:
        return k, dt
    kmax = k
    k = _first_reaching(p, m1, left_s)  # stop at the first step that starts at or after left_s
    if k >= kmax:
        return kmax, dt
    dt = k * p + m1 * k * (k - 1) * 0.5
    while dt < left_s and k < kmax:  # float slack
        k += 1
        dt = k * p + m1 * k * (k - 1) * 0.5
    while k > 1:  # step k-1 (0-based) may start at or after it
        prev = dt - fixed - (m0 + m1 * (k - 1))
        if prev < left_s:
            break
        k, dt = k - 1, prev
    return k, dt


def decode_run(
    fixed: float, m0: float, m1: float, c0: float, c1: float, k: int, left_s: float
) -> tuple[int, float]:
    """(k, time of k steps) of a decode run of at most `k` steps with the coefficients of
    `decode_coeffs`: the steps that start within `left_s` (all k when it is infinite).
    Shared by `instance.Engine` and its compiled twin (`kernel`)."""
    if m0 >= c0 and m1 >= c1:
        return _memory_bound_run(fixed, m0, m1, k, left_s)
    if left_s != math.inf:
        return steps_until(fixed, m0, m1, c0, c1, left_s, k)
    return k, steps_time_s(fixed, m0, m1, c0, c1, k)


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
    """`StepModel.time_s` of one sequence's steps, vectorized (new_tokens > 0 everywhere)."""
    mem = step.dense_weight_read_s + step.kv_read_s_per_token * kv
    if step.num_experts:
        miss = (1.0 - step.experts_per_tok / step.num_experts) ** new
        mem = mem + step.expert_read_s * step.num_experts * (1.0 - miss)
    comp = step.compute_s_per_token * new + step.attn_s_per_pair * pairs
    comm = step.comm_latency_s + step.comm_s_per_token * new if step.comm_latency_s else 0.0
    fixed = step.overhead_s + step.seq_s + np.where(new > step.graph_max_tokens, step.eager_s, 0.0)
    return fixed + np.maximum(mem, comp) + comm


# Past a step's start by less than any step lasts: running an engine up to its start plus
# this runs exactly the step that starts there (steps take microseconds or more).
FIRST_STEP_S = 1e-9


def wake_after_s(idle_s: float, knots) -> float:
    """The wake-up of a request that finds the engine idle for `idle_s`, s: linear between
    `InstancePerf.wake_knots` (idle times, then wake-ups), flat outside them (both engines;
    `np.interp` is the same function over arrays)."""
    k = len(knots) // 2
    if idle_s <= knots[0]:
        return knots[k]
    for i in range(1, k):
        if idle_s < knots[i]:
            g0, w0 = knots[i - 1], knots[k + i - 1]
            return w0 + (knots[k + i] - w0) * (idle_s - g0) / (knots[i] - g0)
    return knots[2 * k - 1]


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
        more = more[keep]
        ctx = ctx[keep]
        left = left[keep]
        part = part[keep]
    dec = decode_time_vec(step, input_tokens.astype(np.float64), output_tokens - 1)
    if perf.step_jitter_cv > 0:
        mult = jitter(perf.step_jitter_cv, 2 * len(pf), seed=JITTER_SEED).reshape(2, -1)
        pf, dec = pf * mult[0], dec * mult[1]
    return pf, pf + dec
