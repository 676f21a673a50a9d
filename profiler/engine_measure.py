"""The measurements of one engine run: prefill latency vs prompt length, TPOT vs
concurrency (streams read in one gulp handled apart), sleep/wake times."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from planner.profiler.engine_client import Chunk, Client, prompt_ids, tpot_of
from planner.profiler.engine_runs import BenchConfig
from planner.profiler.stats import summarize
from planner.schemas.profile import DecodePoint, EngineRun, IdlePoint, PrefillPoint

if TYPE_CHECKING:
    from planner.engines.base import Engine


def first_token_s(client: Client, n: int, vocab: int, rng: Any) -> float:
    """Seconds from sending one `n`-token prompt to its first streamed token (a real stream
    goes on: two tokens asked)."""
    start, chunks = client.streams([prompt_ids(n, vocab, rng)], 2)[0]
    if not chunks:
        raise RuntimeError(f"a {n}-token prompt streamed no token")
    return chunks[0][0] - start


def measure_prefill(
    client: Client, cfg: BenchConfig, vocab: int, rng: Any, tick: Callable[[str], None]
) -> list[PrefillPoint]:
    """Time to the first streamed token of one prompt at each prompt length.

    Streamed, like the TTFT a user sees and the simulator predicts: the response's own
    assembly after the token is not part of it.
    """
    out: list[PrefillPoint] = []
    for n in cfg.prompt_lens:
        samples = []
        for _ in range(cfg.prefill_reps):
            # an idle engine parks its threads; waking them is part of TTFT
            time.sleep(cfg.prefill_idle_s)
            samples.append(first_token_s(client, n, vocab, rng))
        out.append(PrefillPoint(prompt_tokens=n, latency_s=summarize(samples)))
        tick(f"prefill {n} tokens")
    return out


def measure_idle(
    client: Client, cfg: BenchConfig, vocab: int, rng: Any, tick: Callable[[str], None]
) -> list[IdlePoint]:
    """Time to the first streamed token of one prompt sent each of `cfg.idle_gaps_s` after a
    short stream ended; the gaps take turns, so the host's drift reaches each alike."""
    n = cfg.idle_prompt_tokens
    samples: dict[float, list[float]] = {g: [] for g in cfg.idle_gaps_s}
    for _ in range(cfg.idle_reps):
        for gap in cfg.idle_gaps_s:
            client.streams([prompt_ids(16, vocab, rng)], 2)  # the engine at work, then quiet
            time.sleep(gap)
            samples[gap].append(first_token_s(client, n, vocab, rng))
        tick("idle wake-up")
    return [
        IdlePoint(idle_s=g, prompt_tokens=n, latency_s=summarize(v))
        for g, v in samples.items()
        if v
    ]


GULP_GAP_S = 0.0002  # chunks closer than this were read together, not produced a step apart


def burst(chunks: list[Chunk], out_tokens: int) -> bool:
    """Whether half a stream's tokens or more arrived in one gulp.

    The engine emits a token per stream per step (a millisecond or more apart). Tokens that
    arrive within `GULP_GAP_S` of each other were held back, by a reader or by the server's
    HTTP process starved of CPU, and their spacing says nothing about the engine's steps.
    """
    if out_tokens < 4 or not chunks:
        return False
    big = run = 0
    prev_t, prev_n = None, 0
    for t, n in chunks:
        step = n - prev_n if n >= 0 and prev_n >= 0 else 1  # tokens this chunk carries
        run = run + step if prev_t is not None and t - prev_t < GULP_GAP_S else step
        big = max(big, run)
        prev_t, prev_n = t, n
    return big >= out_tokens / 2


def gulped_tpot(
    start: float, chunks: list[Chunk], out_tokens: int, prefill_s: float
) -> float | None:
    """TPOT of a stream read in one burst: end-to-end time minus the prefill, per later token.

    Its chunk spacing is meaningless, but its last token still arrives after the whole
    generation: (last arrival - send - prefill latency) / (tokens - 1).
    """
    if out_tokens < 2 or not chunks:
        return None
    return max(0.0, chunks[-1][0] - start - prefill_s) / (out_tokens - 1)


def measure_decode(
    client: Client,
    cfg: BenchConfig,
    vocab: int,
    rng: Any,
    tick: Callable[[str], None],
    notes: list[str] | None = None,
    prefill: list[PrefillPoint] | None = None,
) -> list[DecodePoint]:
    """TPOT (and TTFT) of `c` streams started together, for each concurrency `c`, at the
    decode prompt and again at the long one (`cfg.decode_long_prompt_tokens`), if any.

    A stream read in one burst (`burst`) gets `gulped_tpot` when the prefill latency of its
    prompt is known (`prefill`: the run's prefill points), else it is left out; `notes`
    counts them.
    """
    out: list[DecodePoint] = []
    prompts = [cfg.decode_prompt_tokens, cfg.decode_long_prompt_tokens]
    for p in filter(None, prompts):
        prefill_s = prefill_at(prefill or [], p)
        name = "" if p == cfg.decode_prompt_tokens else f" at {p} tok"
        for c in cfg.concurrencies:
            point, bursts = _decode_point(client, cfg, vocab, rng, c, p, prefill_s)
            if point is not None:
                out.append(point)
            if bursts and notes is not None:
                how = (
                    "TPOT from end-to-end time minus prefill"
                    if prefill_s is not None
                    else "not in TPOT"
                )
                notes.append(
                    f"decode x{c}{name}: {bursts} stream(s) arrived in one burst (HTTP process "
                    f"starved of CPU); {how}"
                )
            tick(f"decode x{c}{name}")
    return out


def _decode_point(
    client: Client,
    cfg: BenchConfig,
    vocab: int,
    rng: Any,
    c: int,
    prompt_tokens: int,
    prefill_s: float | None,
) -> tuple[DecodePoint | None, int]:
    """One decode point (None: no stream gave a TPOT) and how many streams came in a burst."""
    o = cfg.decode_output_tokens
    tpots: list[float] = []
    ttfts: list[float] = []
    bursts = 0
    # enough rounds that even concurrency 1 gives `decode_min_samples` streams
    for _ in range(max(cfg.decode_rounds, math.ceil(cfg.decode_min_samples / c))):
        prompts = [prompt_ids(prompt_tokens, vocab, rng) for _ in range(c)]
        for start, chunks in client.streams(prompts, o):
            if burst(chunks, o):
                bursts += 1
                t = gulped_tpot(start, chunks, o, prefill_s) if prefill_s is not None else None
            else:
                t = tpot_of(chunks)
                if chunks:
                    ttfts.append(chunks[0][0] - start)  # a gulped stream's first token is late
            if t is not None:
                tpots.append(t)
    if not tpots:
        return None, bursts
    point = DecodePoint(
        concurrency=c,
        output_tokens=o,
        prompt_tokens=prompt_tokens,
        tpot_s=summarize(tpots),
        ttft_s=summarize(ttfts) if ttfts else None,
    )
    return point, bursts


def prefill_at(points: list[PrefillPoint], prompt_tokens: int) -> float | None:
    """Median prefill latency at the measured prompt length closest to `prompt_tokens`."""
    if not points:
        return None
    return min(points, key=lambda p: abs(p.prompt_tokens - prompt_tokens)).latency_s.median


def measure_sleep(client: Client, run: EngineRun, engine: Engine) -> None:
    """Sleep/wake times of levels 1 and 2 (CUDA builds with sleep mode and dev endpoints)."""
    sleep1 = engine.sleep_route(1)
    sleep2 = engine.sleep_route(2)
    wake = engine.wake_route
    s1, st = client.post_s(sleep1, purpose="sleep")
    if st != 200:
        fix = engine.failure_fix("sleep_refused")  # the engine says why it may refuse
        run.notes.append(f"POST {sleep1} answered {st}" + (f": {fix}" if fix else ""))
        return
    w1, st = client.post_s(wake)
    run.sleep_l1_s, run.wake_l1_s = s1, w1
    if st != 200:
        run.notes.append(f"POST {wake} answered {st}")
        return
    s2, st = client.post_s(sleep2, purpose="sleep")
    if st != 200:
        run.notes.append(f"POST {sleep2} answered {st}")
        return
    # level 2 dropped the weights: the engine's wake steps reload them (as the runtime's wake)
    w2 = 0.0
    for route, body in engine.wake_steps(2):
        took_s, st2 = client.post_s(route, body)
        w2 += took_s
        if st2 != 200:
            run.notes.append(f"POST {route} answered {st2}: wake_l2_s lacks that step")
    run.sleep_l2_s, run.wake_l2_s = s2, w2
