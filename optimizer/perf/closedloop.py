"""The closed loop: `clients` users, each sending its next request when the last one ends.

A serving benchmark (`vllm bench serve --max-concurrency C`) and a team's agents calling a
model in a loop both look like this. The means come from the perf model's step times
(`StepModel.time_s`) and vLLM V1's scheduling, in closed form (a mean-value model of the
periodic steady state, fast enough for every candidate of a search):

- `n` = min(clients, max_num_seqs, sequences the KV cache holds) run at once (vLLM
  allocates KV as tokens come, so a sequence holds its prompt and half its output on
  average); the other clients queue for a slot (queueing appears only when a cap binds);
- a step serves the running decodes first (one token each), then prompt chunks within the
  rest of the token budget (`chunk_tokens`); one prompt takes `s` = ceil(prompt / that rest)
  steps, each carrying a chunk and the other clients' decodes;
- over one period each client prefills once and decodes output-1 times; the other clients'
  chunks ride in its decode steps, so TPOT is the mean of plain decode steps and chunk-
  carrying ones in proportion (while prompts arrive faster than one chunk a step, steps
  carry several and the prompts queue: the period stretches and TTFT grows);
- TTFT: the request reaches the engine `prefill_overhead_s` (+ `prompt_s_per_token` per
  prompt token) after it is sent (HTTP, tokenization), waits for the step running then (the
  clients still decoding), then takes its `s` chunk steps; where the profile split the
  overhead (CPU build) a lone client's request finds the engine idle and pays it whole, one
  of several clients finds it at work and pays the busy one (`InstancePerf.busy_delay_s`);
- a benchmark's first round differs: every client sends at time 0, so the prompts queue for
  the budget together; `rounds` (requests per client) weighs it into the means;
- after it, clients sending fixed-length requests keep its order: those whose prompts shared
  a step finish together one step after the group before them, arrive while that group is
  prefilled and wait its step out (`_chained_ttft`); `chained` is the share of requests
  that still do (jitter spreads the rest into the steady state).

What TTFT at a concurrency means (`planner estimate`, the plan's promises): the mean over
the requests of N clients sending fixed-length requests back to back, weighing requests still
in the first round's order by CHAIN_SHARE (`chained=CHAIN_SHARE`) and, of the others, a
first-round burst (every client sending at once) by BURST_SHARE (`rounds=1 / BURST_SHARE`)
and the spread-out steady state by the rest; TPOT is the steady state's. The simulator
replaying those three cases of the same loop agrees within 5% (bench/simulator_vs_estimate.py).

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.optimizer.perf.types import InstancePerf


@dataclass(frozen=True)
class LoopResult:
    """Means over the requests of the closed loop (see `closed_loop`)."""

    ttft_s: float  # mean time to first token as the client sees it, s
    tpot_s: float  # mean time per output token after the first, s
    tokens_per_s: float  # output tokens per second, all clients together
    running: int  # sequences the engine runs at once (the rest queue for a slot)
    budget_bound: bool  # the prompts need more than the token budget leaves: they queue


INFEASIBLE = LoopResult(math.inf, math.inf, 0.0, 0, False)

# A serving benchmark's clients (fixed-length requests back to back): the share of requests
# still in its first round's order (`_chained_ttft`) and, of the others, the share sent in
# that round, all clients at once (with the first, about 1 in 8 of all requests). Both
# fitted with the engine's constants to the 744 serving rows of
# bench/data/aiconfigurator/silicon_vllm_agg.csv (bench/perfmodel_vs_serving.py, its line
# "all rows": burst_share 0.129, chain_share 0.0826; 0.12-0.15 and 0.067-0.092 in its
# leave-one-out folds); `closed_loop(..., rounds=1 / BURST_SHARE, chained=CHAIN_SHARE)`
# applies them. With the first round alone one share (0.168) could not serve both prompt
# lengths: 1024-token prompts wanted ~0.2, 8192-token ones ~0.12 at 32+ clients, as a chain
# costs whole steps, a larger part of the short prompts' first round (a few steps) than of
# the long ones' (one step per prompt or two).
BURST_SHARE = 0.129
CHAIN_SHARE = 0.083


def closed_loop(
    perf: InstancePerf,
    input_len: int,
    output_len: int,
    clients: int,
    *,
    rounds: float | None = None,
    chained: float = 0.0,
    cached_len: int = 0,
) -> LoopResult:
    """Mean TTFT and TPOT of `clients` clients sending `input_len`-token prompts for
    `output_len` tokens back to back: the steady state, or with `rounds` the mean over that
    many requests per client of a run whose clients all start together (a benchmark), with
    `chained` of the requests in the first round's order. The first `cached_len` tokens of
    each prompt are a prefix-cache hit: held in KV, not computed (vLLM computes at least the
    last prompt token). A request that cannot fit the KV cache gives infinite times.
    """
    st = perf.step
    inp = max(1, int(input_len))
    out = max(1, int(output_len))
    c = max(1, int(clients))
    if perf.max_kv_tokens < inp + out:
        return INFEASIBLE  # one request alone does not fit
    # vLLM allocates KV as tokens are computed (and preempts the newest sequence when it runs
    # out), so a desynchronized batch holds prompt + half the output per sequence on average
    fits = int(perf.max_kv_tokens // (inp + out / 2.0))
    n = min(c, max(1, perf.max_num_seqs), fits)
    ctx = inp + out / 2.0  # mean context of a decoding sequence, tokens
    hit = min(max(0, int(cached_len)), inp - 1)  # prompt tokens already in the prefix cache
    new_tok = inp - hit  # prompt tokens each request computes
    front = perf.prefill_overhead_s if c == 1 else perf.busy_delay_s  # idle: one client
    delay = front + inp * perf.prompt_s_per_token  # sent -> at the engine
    budget = max(1, perf.chunk_tokens)
    dec = float(n if out > 1 else 0)  # sequences decoding in a step (refined below)
    for _ in range(3):  # decodes take the budget first; the prompts get the rest
        rest = max(1, int(budget - dec))  # prompt tokens of a full chunk
        s = math.ceil(new_tok / rest)  # steps one prompt needs: s-1 full chunks and a last one
        last = new_tok - (s - 1) * rest
        # a request's own steps: its chunks (the last one shares a step with other prompts'
        # chunks in the steady state: counted by its tokens), then its decodes
        steps = new_tok / rest + out - 1
        # the period: its own steps, or longer when the prompts need more budget than that
        period = max(steps, n * (new_tok + out - 1) / budget)
        dec = n * (out - 1) / period

    def step(decoding: float, new: float, prefix: float) -> float:
        kv = decoding * ctx
        pairs = kv + new * (prefix + (new + 1) / 2.0)  # causal pairs of the chunk's tokens
        prompts = max(1.0, new / min(new_tok, rest)) if new else 0.0  # sequences prefilling
        return st.time_s(decoding + new, kv + prefix + new, pairs, decoding + prompts)

    def chunks(decoding: float) -> float:
        """One prompt's chunk steps beside `decoding` sequences, s."""
        full = (s - 1) * step(decoding, rest, hit + (s - 2) * rest / 2.0) if s > 1 else 0.0
        return full + step(decoding, last, hit + (s - 1) * rest)

    others = dec * (n - 1) / n  # the other clients' decodes in a step
    plain = step(1 + others, 0.0, 0.0) if out > 1 else 0.0  # a decode step of its own
    # what the other clients' prompts add to the steps it decodes in: `share` of the steps
    # carry `y` prompt tokens (one chunk, or more when prompts come faster than a chunk a step)
    prompts = (n - 1) * new_tok / period  # the others' prompt tokens per step, on average
    y = max(min(new_tok, rest), prompts)
    share = prompts / y
    prefix = hit + (new_tok - min(new_tok, rest)) / 2.0  # mean prefix of a chunk, tokens
    extra = share * (step(1 + others, y, prefix) - plain) if n > 1 else 0.0
    tpot = plain + extra if out > 1 else 0.0
    # it arrives `delay` after its last token, while a step of the others runs; its own
    # chunks then ride in steps that carry the others' decodes and chunks too
    running = step(others, 0.0, 0.0) + extra if n > 1 else 0.0
    wait = max(0.0, running - delay)
    queued = (period - steps) * running  # prompts ahead of it in the budget
    service = delay + wait + queued + chunks(others) + new_tok / rest * extra  # TTFT in a slot
    hold = service + (out - 1) * tpot  # time a request holds its slot, s
    ttft = service + (c / n - 1) * hold  # waiting for a slot when a cap binds
    if rounds is not None and rounds > 1:
        ttft = ((rounds - 1) * ttft + _first_round_ttft(perf, inp, new_tok, c, n, hold)) / rounds
    elif rounds == 1:
        ttft = _first_round_ttft(perf, inp, new_tok, c, n, hold)
    if chained > 0:
        ttft = (1 - chained) * ttft + chained * _chained_ttft(perf, new_tok, n, delay)
    return LoopResult(ttft, tpot, n * out / hold, n, period > steps)


def _first_round_ttft(
    perf: InstancePerf, inp: int, new_tok: int, c: int, n: int, hold: float
) -> float:
    """Mean TTFT of the clients' first requests, all sent at time 0: the first `n` prompts
    fill whole budgets one step after another; the rest wait for slots."""
    tokens = min(max(1, perf.chunk_tokens), n * new_tok)  # prompt tokens of each first step
    full = perf.step.time_s(tokens, tokens, tokens * (new_tok + 1) / 2.0, tokens / new_tok)
    k = n * new_tok / tokens  # steps to prefill the first n prompts
    wait = full * max(1.0, (k + 1) / 2.0)  # their mean wait for their last chunk
    extra = c - n  # clients without a slot at first: served a hold later, in waves of n
    slots = extra * hold * ((extra / n) + 1) / 2.0 if extra > 0 else 0.0
    # sent together to an idle engine: each waits for it to wake (the idle overhead)
    delay = perf.prefill_overhead_s + inp * perf.prompt_s_per_token
    return delay + wait + slots / c


def _chained_ttft(perf: InstancePerf, new_tok: int, n: int, delay: float) -> float:
    """Mean TTFT of a later-round request of clients still in the first round's order. The
    prompts that shared a first-round step decode in the same steps, so they finish together,
    one step after the group prefilled before them: `delay` (sent -> at the engine) after
    that, they find the previous group's prompts filling the budget, wait that step out,
    then fill their own. The first group (a lone one when one step held every prompt) finds
    the others decoding instead."""
    tokens = min(max(1, perf.chunk_tokens), n * new_tok)  # prompt tokens of a group's step
    full = perf.step.time_s(tokens, tokens, tokens * (new_tok + 1) / 2.0, tokens / new_tok)
    groups = n * new_tok / tokens  # first-round steps
    return delay + full + (1 - 1 / groups) * max(0.0, full - delay)


def benchmark_loop(perf: InstancePerf, input_len: int, output_len: int, clients: int) -> LoopResult:
    """The closed loop as a serving benchmark runs it (what TTFT at a concurrency means: the
    module docstring): its first round's share and its chained share weighed in."""
    return closed_loop(
        perf, input_len, output_len, clients, rounds=1 / BURST_SHARE, chained=CHAIN_SHARE
    )


def steady_state(
    perf: InstancePerf, input_len: int, output_len: int, concurrency: int, cached_len: int = 0
) -> tuple[float, float, float]:
    """(mean TTFT s, mean TPOT s, output tokens/s) of `concurrency` clients in the steady
    state of the closed loop (see `closed_loop`; `cached_len` prompt tokens a prefix-cache
    hit); (inf, inf, 0) when a request cannot fit."""
    r = closed_loop(perf, input_len, output_len, concurrency, cached_len=cached_len)
    return r.ttft_s, r.tpot_s, r.tokens_per_s
