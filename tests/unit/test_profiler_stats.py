"""Repeated-timing statistics: percentiles, median/spread, batching, the timing loop (fake timer)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.profiler.stats import (
    CudaEventTimer,
    inner_iterations,
    percentile,
    rate_stat,
    summarize,
    time_repeated,
)


class FakeTimer:
    """Returns preset durations; counts starts (stands in for wall clock or CUDA events)."""

    def __init__(self, durations):
        self.durations = list(durations)
        self.starts = 0

    def start(self):
        self.starts += 1

    def stop(self):
        return self.durations.pop(0)


def test_percentile_interpolates():
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert percentile(xs, 50) == 3.0
    assert percentile(xs, 0) == 1.0
    assert percentile(xs, 100) == 5.0
    assert percentile(xs, 10) == pytest.approx(1.4)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_summarize_median_spread_n():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s.median == 3.0
    assert s.spread == pytest.approx(4.6 - 1.4)
    assert s.n == 5
    assert s.trimmed_mean == 3.0  # 2, 3 and 4
    assert summarize([5.0, 1.0, 3.0, 2.0]).trimmed_mean == 2.75  # under 5: all of them
    with pytest.raises(ValueError):
        summarize([])


@given(st.lists(st.floats(min_value=1e-9, max_value=1e9), min_size=1, max_size=50))
def test_summarize_invariants(xs):
    s = summarize(xs)
    assert min(xs) <= s.median <= max(xs)
    assert 0 <= s.spread <= max(xs) - min(xs) + 1e-6 * max(xs)
    tol = 1e-9 * max(xs)
    assert min(xs) - tol <= s.trimmed_mean <= max(xs) + tol
    if len(xs) >= 5:  # one stalled repetition, however long, moves it no further
        assert summarize([*xs[:-1], 1e12]).trimmed_mean == summarize([*xs[:-1], 2e9]).trimmed_mean


def test_rate_stat_is_work_over_time():
    s = rate_stat([0.5, 0.25, 1.0], work=2e9, unit=1e9)
    assert s.median == pytest.approx(4.0)  # rates 4, 8, 2 GB/s
    assert s.n == 3


def test_inner_iterations_batches_short_calls():
    assert inner_iterations(0.001, 0.05) == 50
    assert inner_iterations(1.0, 0.05) == 1
    assert inner_iterations(0.0, 0.05) == 1000
    assert inner_iterations(1e-9, 0.05, cap=10) == 10


def test_time_repeated_warmup_reps_inner_and_before():
    calls = []
    befores = []
    timer = FakeTimer([0.4, 0.8, 1.2])
    out = time_repeated(
        lambda: calls.append(1),
        timer=timer,
        warmup=2,
        reps=3,
        inner=4,
        before=lambda: befores.append(1),
    )
    assert out == pytest.approx([0.1, 0.2, 0.3])  # per call: divided by inner
    assert len(calls) == 2 + 3 * 4
    assert len(befores) == 2 + 3  # before each warm-up call and each repetition
    assert timer.starts == 3


def test_cuda_event_timer_records_and_synchronizes():
    """CUDA-path logic with fake events (no GPU here): ms -> s, end event synchronized."""
    log = []

    class Ev:
        def __init__(self, enable_timing):
            assert enable_timing
            self.name = f"e{len(log)}"

        def record(self):
            log.append(("record", self))

        def synchronize(self):
            log.append(("sync", self))

        def elapsed_time(self, other):
            return 250.0

    class Cuda:
        Event = Ev

    class FakeTorch:
        cuda = Cuda

    t = CudaEventTimer(FakeTorch)
    t.start()
    assert t.stop() == 0.25
    assert [k for k, _ in log] == ["record", "record", "sync"]
