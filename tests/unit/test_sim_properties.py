"""Simulator invariants on random traces: every request counted once, sane times, determinism."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from optimizer_builders import SLO, perf, point, step_model, trace

from planner.optimizer.sim.simulator import simulate

STEP = step_model(
    overhead_s=0.002, dense_weight_read_s=0.01, kv_read_s_per_token=1e-7, compute_s_per_token=3e-5
)
PERF = perf(STEP, max_num_seqs=4, max_kv_tokens=6000, chunk_tokens=512)


def random_trace(seed: int, n: int, models: list[str]) -> dict:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(rng.uniform(0.05, 5.0), n))
    return trace(
        t,
        rng.choice(models, n).astype(object),
        rng.integers(1, 3000, n),
        rng.integers(1, 200, n),
        session=rng.integers(0, 6, n).astype(str),
        cached=rng.integers(0, 500, n),
    )


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 300),
    tiers=st.lists(st.sampled_from(["gpu", "host", "disk"]), min_size=1, max_size=4),
    shared=st.booleans(),
    idle=st.sampled_from([None, 5.0]),
    policy=st.sampled_from(["plan", "lru"]),
)
def test_count_in_equals_count_out(seed, n, tiers, shared, idle, policy):
    # Instance k serves model m(k % 3); "ghost" has no instance at all.
    models = [f"m{k % 3}" for k in range(len(tiers))]
    gpus = [[0]] * len(tiers) if shared else [[k] for k in range(len(tiers))]
    pt = point(tiers, models=models, gpus=gpus)
    tr = random_trace(seed, n, ["m0", "m1", "m2", "ghost"])
    mem = {("n", g): 20.0 for g in range(len(tiers))}
    r = simulate(
        pt,
        {i.id: PERF for i in pt.instances},
        tr,
        SLO,
        sleep_after_idle_s=idle,
        policy=policy,
        gpu_memory_gib=mem,
    )
    served = r.instance >= 0
    placed = {i.model for i in pt.instances}
    want = np.array([m in placed for m in tr["model"]])
    assert r.requests == n == len(r.ttft_s)
    assert (served == want).all()
    assert np.isfinite(r.ttft_s[served]).all() and np.isfinite(r.e2e_s[served]).all()
    assert np.isnan(r.ttft_s[~served]).all() and not r.met_slo[~served].any()
    assert (r.ttft_s[served] > 0).all()
    assert (r.e2e_s[served] >= r.ttft_s[served] - 1e-12).all()
    assert (r.switch_wait_s >= 0).all() and (
        r.switch_wait_s[served] <= r.ttft_s[served] + 1e-9
    ).all()
    m = r.to_metrics()
    assert m["requests"] == n == sum(v["requests"] for v in m["per_model"].values())
    assert 0.0 <= m["slo_attainment"] <= 1.0
    assert r.wakes >= r.sleeps - len(tiers) and r.warm_gpu_gib >= 0
    assert 0.0 <= r.gpu_busy_fraction <= 1.0


def test_same_inputs_same_numbers():
    pt = point(
        ["gpu", "host", "host", "disk"], models=["m0", "m1", "m2", "m1"], gpus=[[0], [1], [1], [1]]
    )
    perfs = {i.id: PERF for i in pt.instances}
    tr = random_trace(11, 2000, ["m0", "m1", "m2"])
    a = simulate(pt, perfs, tr, SLO)
    b = simulate(pt, perfs, tr, SLO)
    assert a.to_metrics() == b.to_metrics()
    for f in ("ttft_s", "tpot_s", "e2e_s", "switch_wait_s", "met_slo", "instance"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert a.wakes == b.wakes > 0


def test_memo_of_alone_instances_gives_the_same_numbers():
    from planner.optimizer.sim import simulator
    from planner.optimizer.sim.request import to_requests

    req = to_requests(random_trace(5, 3000, ["m0", "m1"]), ["m0", "m1"])
    a_pt = point(["gpu", "gpu"], gpus=[[0], [1]])
    b_pt = point(["gpu", "host"], gpus=[[0], [1]])  # m0's instance is the same in both
    perfs = {"i0": PERF, "i1": perf(STEP, max_num_seqs=2, max_kv_tokens=4000, chunk_tokens=256)}
    simulator.clear_caches()
    cold_b = simulate(b_pt, perfs, req, SLO)
    simulator.clear_caches()
    simulate(a_pt, perfs, req, SLO)  # remembers m0 (and m1 on its gpu-tier instance)
    warm_b = simulate(b_pt, perfs, req, SLO)
    assert warm_b.to_metrics() == cold_b.to_metrics()
    np.testing.assert_array_equal(warm_b.e2e_s, cold_b.e2e_s)
    assert warm_b.gpu_busy_fraction == cold_b.gpu_busy_fraction


def test_lone_times_memo_returns_the_same_arrays_and_stays_bounded(monkeypatch):
    from planner.optimizer.sim import lonememo
    from planner.optimizer.sim.request import to_requests
    from planner.optimizer.sim.steptime import lone_times

    req = to_requests(random_trace(3, 500, ["m0"]), ["m0"])
    args = (req.input_tokens, req.cached_tokens, req.output_tokens)
    monkeypatch.setattr(lonememo, "MAX_VALUES", 3 * len(req))  # room for one entry, not two
    lonememo.clear()
    a = lonememo.lone_times_of(req, 0, PERF, "hit", *args, memo=True)
    assert lonememo.lone_times_of(req, 0, PERF, "hit", *args, memo=True)[0] is a[0]  # recalled
    b = lonememo.lone_times_of(req, 0, perf(STEP, chunk_tokens=256), "hit", *args, memo=True)
    assert len(lonememo._MEMO) == 1 and lonememo._held <= lonememo.MAX_VALUES  # a went
    for got, perf_ in ((a, PERF), (b, perf(STEP, chunk_tokens=256))):
        want = lone_times(perf_, *args)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    lonememo.clear()


def test_the_simulator_caches_key_a_trace_by_its_values():
    """An equal trace in another object shares the caches' entries; one token changed makes a
    new entry (keys are values, so a freed trace's reused id() cannot alias one)."""
    import dataclasses

    from planner.optimizer.sim import alone, lonememo, simulator
    from planner.optimizer.sim.request import to_requests
    from planner.optimizer.sim.steptime import lone_times

    raw = random_trace(7, 500, ["m0", "m1"])
    req, twin = to_requests(raw, ["m0", "m1"]), to_requests(raw, ["m0", "m1"])
    assert twin is not req
    pt = point(["gpu", "gpu"], gpus=[[0], [1]])
    perfs = {"i0": PERF, "i1": PERF}
    simulator.clear_caches()
    first = simulate(pt, perfs, req, SLO)
    held = (len(alone._CACHE), len(lonememo._MEMO))
    assert held[0] > 0
    again = simulate(pt, perfs, twin, SLO)
    assert (len(alone._CACHE), len(lonememo._MEMO)) == held  # recalled, nothing added
    np.testing.assert_array_equal(again.e2e_s, first.e2e_s)

    other = dataclasses.replace(req, input_tokens=req.input_tokens.copy())
    other.input_tokens[0] += 1
    args = (other.input_tokens, other.cached_tokens, other.output_tokens)
    lonememo.clear()
    a = lonememo.lone_times_of(req, 0, PERF, "hit", *args, memo=True)
    b = lonememo.lone_times_of(other, 0, PERF, "hit", *args, memo=True)
    assert b[0] is not a[0] and len(lonememo._MEMO) == 2
    np.testing.assert_array_equal(b[0], lone_times(PERF, *args)[0])
    simulator.clear_caches()
