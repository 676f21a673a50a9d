"""Repeated timing: warm-ups, repetitions, median and spread, with a pluggable timer.

A timer is an object with `start()` and `stop() -> seconds`. On the CPU it reads
`time.perf_counter`; on CUDA it records a pair of `torch.cuda.Event`s and synchronizes
before reading them, so queued kernels are counted. Tests pass a fake timer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from planner.schemas.profile import Stat


class Timer(Protocol):
    """Times one region: `start()` then `stop()` returns its length in seconds."""

    def start(self) -> None: ...

    def stop(self) -> float: ...


class WallTimer:
    """Host wall clock (perf_counter)."""

    def __init__(self) -> None:
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        return time.perf_counter() - self._t0


class CudaEventTimer:
    """Device-side time between two CUDA events on the current stream."""

    def __init__(self, torch_mod) -> None:
        self._torch = torch_mod
        self._a = torch_mod.cuda.Event(enable_timing=True)
        self._b = torch_mod.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._a.record()

    def stop(self) -> float:
        self._b.record()
        self._b.synchronize()  # elapsed_time needs both events completed
        return self._a.elapsed_time(self._b) / 1000.0  # ms -> s


def percentile(xs: Sequence[float], q: float) -> float:
    """Percentile (q in 0..100) of a non-empty sequence, numpy's default "linear" method:
    interpolated between the two closest ranks at (n - 1) * q / 100."""
    import numpy as np

    if not xs:
        raise ValueError("percentile of no samples")
    return float(np.percentile(xs, q))


def trimmed_mean(samples: Sequence[float]) -> float:
    """Mean less the highest and the lowest sample where there are 5 or more: one stalled
    repetition moves it little, and unlike the median it mixes the modes of a bimodal time."""
    s = sorted(samples)
    if len(s) >= 5:
        s = s[1:-1]
    return sum(s) / len(s)


def summarize(samples: Sequence[float]) -> Stat:
    """Median, p90-p10 spread and trimmed mean of repeated samples."""
    if not samples:
        raise ValueError("no samples to summarize")
    return Stat(
        median=percentile(samples, 50),
        spread=max(0.0, percentile(samples, 90) - percentile(samples, 10)),
        n=len(samples),
        trimmed_mean=trimmed_mean(samples),
    )


def rate_stat(times_s: Sequence[float], work: float, unit: float = 1.0) -> Stat:
    """Summary of `work / time / unit` over repetitions (a rate: GB/s, TFLOP/s)."""
    return summarize([work / t / unit for t in times_s if t > 0])


def inner_iterations(first_s: float, target_s: float, cap: int = 1000) -> int:
    """How many calls one repetition should batch so that it lasts about `target_s`.

    Short kernels are timed in batches: a single call would mostly measure launch and
    timer overhead.
    """
    if first_s <= 0:
        return cap
    return max(1, min(cap, round(target_s / first_s)))


def time_repeated(
    fn: Callable[[], object],
    *,
    timer: Timer,
    warmup: int = 2,
    reps: int = 5,
    inner: int = 1,
    before: Callable[[], object] | None = None,
) -> list[float]:
    """Seconds per call of `fn` over `reps` repetitions of `inner` calls, after `warmup` calls.

    `before` runs untimed ahead of every repetition (e.g. dropping the page cache).
    """
    for _ in range(warmup):
        if before is not None:
            before()
        fn()
    out: list[float] = []
    for _ in range(reps):
        if before is not None:
            before()
        timer.start()
        for _ in range(inner):
            fn()
        out.append(timer.stop() / inner)
    return out
