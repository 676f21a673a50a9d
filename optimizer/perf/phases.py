"""Engine time of a prefill and of a decode step on one instance, from its step model
(`latency.build_step_model` builds it; `StepModel.time_s` times each step)."""

from __future__ import annotations

from planner.optimizer.perf.types import InstancePerf


def _prefill_chunks(
    perf: InstancePerf, input_len: int, cached_tokens: int, decode_batch: int, decode_kv: float
) -> tuple[float, float]:
    """(wall time, added time) of prefilling `input_len` tokens in chunks of `chunk_tokens`,
    each chunk riding in a step with `decode_batch` sequences that hold `decode_kv` KV tokens.
    Added time: what the chunks add to those decode steps (what the other sequences feel)."""
    done = max(0, min(cached_tokens, input_len))
    wall = 0.0
    added = 0.0
    chunk = max(1, perf.chunk_tokens)
    base = perf.step.time_s(decode_batch, decode_kv, decode_kv, decode_batch)  # s, no chunk
    while done < input_len:
        c = min(chunk, input_len - done)
        pairs = c * done + c * (c + 1) / 2.0  # causal: each new token sees prefix + earlier chunk
        kv = decode_kv + done + c
        t = perf.step.time_s(c + decode_batch, kv, decode_kv + pairs, decode_batch + 1)
        wall += t
        added += t - base
        done += c
    return wall, added


def prefill_s(
    perf: InstancePerf,
    input_len: int,
    cached_tokens: int = 0,
    decode_batch: int = 0,
    decode_kv_tokens: float = 0.0,
) -> float:
    """Engine time to prefill `input_len` tokens (the first `cached_tokens` already in KV),
    in chunks of `chunk_tokens`, alongside `decode_batch` decoding sequences holding
    `decode_kv_tokens` KV tokens together, s."""
    return _prefill_chunks(perf, input_len, cached_tokens, decode_batch, decode_kv_tokens)[0]


def decode_step_s(perf: InstancePerf, batch: int, context_tokens: float) -> float:
    """One decode step of `batch` sequences at an average context of `context_tokens`, s."""
    kv = batch * context_tokens
    return perf.step.time_s(batch, kv, kv, batch)
