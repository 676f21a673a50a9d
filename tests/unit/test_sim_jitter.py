"""Step-time jitter in the simulator: seeded, mean one, off by default; its coefficient of
variation calibrated from the profiler's measured spreads."""

from __future__ import annotations

import dataclasses

import numpy as np
from optimizer_builders import SLO, perf, point, step_model, trace

from planner.optimizer.perf.calibration import P90_P10_SIGMAS, jitter_cv
from planner.optimizer.sim.simulator import simulate
from planner.optimizer.sim.steptime import jitter
from planner.schemas.profile import DecodePoint, EngineRun, PrefillPoint, Profile, Stat

STEP = step_model(
    overhead_s=0.002, dense_weight_read_s=0.01, kv_read_s_per_token=1e-7, compute_s_per_token=3e-5
)
PERF = perf(STEP, max_num_seqs=4, max_kv_tokens=60_000, chunk_tokens=512)


def _run(p, n: int = 400):
    """A light load, seeded: requests mostly alone, a few overlapping (batches form)."""
    rng = np.random.default_rng(3)
    gaps = rng.exponential(2.0, n)
    tr = trace(
        np.cumsum(gaps),
        np.array(["m0"] * n, dtype=object),
        rng.integers(100, 2000, n),
        rng.integers(20, 200, n),
    )
    pt = point(["gpu"], models=["m0"], gpus=[[0]])
    return simulate(pt, {i.id: p for i in pt.instances}, tr, SLO)


def test_multipliers_have_mean_one_and_the_asked_spread():
    u = jitter(0.2, 200_000, seed=0)
    assert abs(u.mean() - 1) < 0.005 and abs(u.std() / u.mean() - 0.2) < 0.005
    assert np.array_equal(u, jitter(0.2, 200_000, seed=0))  # seeded


def test_jitter_widens_the_tail_keeps_the_median_and_repeats():
    calm, noisy = _run(PERF), _run(dataclasses.replace(PERF, step_jitter_cv=0.3))
    again = _run(dataclasses.replace(PERF, step_jitter_cv=0.3))
    assert np.array_equal(noisy.ttft_s, again.ttft_s, equal_nan=True)  # deterministic
    # TTFT's tail is mostly the spread of prompt lengths: jitter widens it less than TPOT's
    for a, b, wider in ((calm.ttft_s, noisy.ttft_s, 1.05), (calm.tpot_s, noisy.tpot_s, 1.2)):
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        assert abs(np.median(b) / np.median(a) - 1) < 0.1
        assert np.percentile(b, 95) > wider * np.percentile(a, 95)


def test_off_by_default():
    assert PERF.step_jitter_cv == 0.0
    a, b = _run(PERF), _run(dataclasses.replace(PERF, step_jitter_cv=0.0))
    assert np.array_equal(a.ttft_s, b.ttft_s, equal_nan=True)
    assert np.array_equal(a.tpot_s, b.tpot_s, equal_nan=True)


def test_cv_from_the_profilers_spreads():
    def s(median: float, cv: float) -> Stat:
        return Stat(median=median, spread=cv * P90_P10_SIGMAS * median, n=5)

    run = EngineRun(
        model="m",
        variant="v",
        tp=1,
        status="ok",
        prefill=[PrefillPoint(prompt_tokens=k, latency_s=s(0.01 * k, 0.1)) for k in (16, 64)],
        decode=[
            DecodePoint(concurrency=c, prompt_tokens=16, output_tokens=32, tpot_s=s(0.02, 0.3))
            for c in (1, 2, 4)
        ],
    )
    assert jitter_cv(Profile(node="n", gpu_type="cpu", engine=[run])) == 0.3  # the median point
    assert jitter_cv(Profile(node="n", gpu_type="cpu")) is None
