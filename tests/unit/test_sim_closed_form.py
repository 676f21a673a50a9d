"""Simulator against arithmetic: step sums, M/D/1 waits, the KV knee, wakes and their delays."""

from __future__ import annotations

import math

import numpy as np
import pytest
from optimizer_builders import perf, point, step_model, trace

from planner.optimizer.sim.instance import DEC, Engine
from planner.optimizer.sim.simulator import simulate
from planner.optimizer.sim.steptime import decode_time_s, lone_times
from planner.schemas.slo import Slo, Targets


def test_decode_time_matches_step_by_step_sum():
    st = step_model(
        overhead_s=0.003,
        dense_weight_read_s=0.01,
        kv_read_s_per_token=2e-7,
        compute_s_per_token=1e-3,
        attn_s_per_pair=5e-8,
        comm_latency_s=1e-4,
        comm_s_per_token=1e-6,
        seq_s=2e-4,
    )
    for n, kv0, k in [(1, 100, 50), (8, 20000, 300), (32, 1000, 1000), (3, 0, 1)]:
        ref = sum(st.time_s(n, kv0 + n * j, kv0 + n * j + n, n) for j in range(k))
        assert decode_time_s(st, n, kv0, k) == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize(
    "regime", ["memory", "compute", "crossing"]
)  # the closed-form inversion of each: in the hot loop (memory) and in steps_until
def test_a_decode_run_stops_at_the_first_step_starting_at_the_next_arrival(regime):
    kw = {
        "memory": dict(dense_weight_read_s=0.01, kv_read_s_per_token=2e-7),
        "compute": dict(compute_s_per_token=5e-3, attn_s_per_pair=1e-6),
        "crossing": dict(dense_weight_read_s=0.004, attn_s_per_pair=2e-6),  # attention overtakes
    }[regime]
    st = step_model(overhead_s=0.002, seq_s=1e-4, **kw)
    n, inp, out = 4, 500, 800
    eng = Engine(perf(st), np.full(n, np.nan), np.full(n, np.nan))
    for rid in range(n):  # four prompts arrive together: one prefill step, then decoding
        eng.submit(rid, 0.0, inp, 0, out, 0.0, 1e9)  # (lone times that force a batch)
    eng.advance_to(1e-9)  # the prefill step
    t0, ctx = eng.t, inp
    for until in (0.05, 0.3, 1.7):
        eng.advance_to(until)
        ref, k = t0, 0  # step by step: steps start while ref < until
        while ref < until:
            ref += st.time_s(n, n * (ctx + k), n * (ctx + k + 1), n)
            k += 1
        assert eng.t == pytest.approx(ref, rel=1e-9)
        t0, ctx = ref, ctx + k
        assert eng.running[0][DEC] == out - 1 - (ctx - inp)  # decode tokens left: whole steps


def test_lone_times_match_chunked_prefill_then_decode():
    st = step_model(
        overhead_s=0.002,
        dense_weight_read_s=0.01,
        compute_s_per_token=1e-5,
        attn_s_per_pair=1e-9,
        seq_s=1e-4,
    )
    p = perf(st, chunk_tokens=512)
    inp, cached, out = 1300, 200, 40
    pf, tot = lone_times(p, np.array([inp]), np.array([cached]), np.array([out]))
    ctx, left, ref = cached, inp - cached, 0.0
    while left:
        c = min(left, 512)
        ref += st.time_s(c, ctx, c * (ctx + (c + 1) / 2))
        ctx, left = ctx + c, left - c
    assert pf[0] == pytest.approx(ref)
    ref_tot = ref + sum(st.time_s(1, inp + j, inp + j + 1) for j in range(out - 1))
    assert tot[0] == pytest.approx(ref_tot)


@pytest.mark.parametrize("tier", ["gpu", "host"])
def test_md1_mean_wait(tier):
    """max_num_seqs=1, every step d seconds, k output tokens: service k*d exactly -> M/D/1."""
    d, k, rho = 0.01, 20, 0.7
    service = k * d  # one prefill step (first token) + k-1 decode steps
    lam = rho / service
    rng = np.random.default_rng(1)
    n = 60_000
    t = np.cumsum(rng.exponential(1 / lam, n))
    p = perf(step_model(dense_weight_read_s=d), max_num_seqs=1)
    pt = point([tier])
    # host tier with an idle timeout goes through the router path, gpu tier the vector path.
    idle = 1e12 if tier == "host" else None
    r = simulate(pt, {"i0": p}, trace(t, "m0", 100, k), Slo(), sleep_after_idle_s=idle)
    wq = rho * service / (2 * (1 - rho))  # Pollaczek-Khinchine, deterministic service
    mean_wait = float(np.mean(r.ttft_s - d))  # TTFT = queueing + the prefill step
    assert mean_wait == pytest.approx(wq, rel=0.10)
    assert np.allclose(r.e2e_s - r.ttft_s, (k - 1) * d)


def test_vector_and_router_paths_agree_under_batching():
    st = step_model(
        overhead_s=0.002,
        dense_weight_read_s=0.02,
        kv_read_s_per_token=1e-7,
        compute_s_per_token=2e-5,
    )
    p = perf(st, max_num_seqs=8, max_kv_tokens=12_000, chunk_tokens=1024)
    rng = np.random.default_rng(3)
    n = 3000
    t = np.cumsum(rng.exponential(1.2, n))
    tr = trace(
        t,
        "m0",
        rng.integers(50, 5000, n),
        rng.integers(1, 300, n),
        session=rng.integers(0, 20, n).astype(str),
        cached=rng.integers(0, 50, n),
    )
    a = simulate(point(["gpu"]), {"i0": p}, tr, Slo())
    b = simulate(point(["host"]), {"i0": p}, tr, Slo(), sleep_after_idle_s=1e12)
    assert a.preemptions > 0 and a.preemptions == b.preemptions  # batches form and overflow KV
    np.testing.assert_allclose(a.ttft_s, b.ttft_s, rtol=1e-9)
    np.testing.assert_allclose(a.e2e_s, b.e2e_s, rtol=1e-9)
    assert (a.cache_hit == b.cache_hit).all()


def test_kv_bound_knee():
    """Concurrency is capped by KV at C/(I+O) sequences, so the instance saturates at
    lambda* = (C/(I+O)) / (O*d) requests/s: below it waits stay short, above they explode."""
    d, inp, out, cap = 0.01, 900, 100, 10_000
    n_conc = cap / (inp + out)  # sequences the KV cache holds
    lam_star = n_conc / (out * d)  # requests/s the instance can finish
    p = perf(step_model(dense_weight_read_s=d), max_num_seqs=256, max_kv_tokens=cap)
    rng = np.random.default_rng(7)
    service = out * d

    def mean_ttft(lam: float, kv: int) -> float:
        n = 6000
        t = np.cumsum(rng.exponential(1 / lam, n))
        r = simulate(
            point(["gpu"]),
            {"i0": perf(p.step, max_num_seqs=256, max_kv_tokens=kv)},
            trace(t, "m0", inp, out),
            Slo(),
        )
        return float(np.nanmean(r.ttft_s))  # over the admitted requests (admission bound)

    below = mean_ttft(0.8 * lam_star, cap)
    above = mean_ttft(1.25 * lam_star, cap)
    assert below < 2 * service
    assert above > 20 * service
    assert mean_ttft(1.25 * lam_star, 2 * cap) < 2 * service  # twice the KV moves the knee


def test_one_model_trace_has_no_switches():
    t = np.arange(0, 1000, 7.0)
    for tier in ("gpu", "host", "disk"):
        r = simulate(
            point([tier]),
            {"i0": perf(step_model(dense_weight_read_s=0.01))},
            trace(t, "m0", 500, 50),
            Slo(),
        )
        m = r.to_metrics()
        assert m["switch_count"] == 0 and m["switch_p95_s"] == 0
        assert (r.switch_wait_s == 0).all()


@pytest.mark.parametrize("tier", ["host", "disk"])
def test_two_models_alternating_on_one_gpu(tier):
    p = perf(step_model(dense_weight_read_s=0.01))
    wake = p.wake_host_s if tier == "host" else p.wake_disk_s
    k = 10
    t = np.arange(2 * k) * 100.0 + 10
    models = ["m0", "m1"] * k
    r = simulate(point([tier, tier]), {"i0": p, "i1": p}, trace(t, models, 500, 50), Slo())
    assert r.wakes == 2 * k - 1  # m0 starts awake; every later hand-off wakes the other model
    assert r.sleeps == 2 * k - 1
    assert r.switch_wait_s[0] == 0
    np.testing.assert_allclose(r.switch_wait_s[1:], p.sleep_s + wake)
    np.testing.assert_allclose(r.ttft_s[1:], p.sleep_s + wake + 0.01)
    # Memory: one model awake at a time, the other holds its CUDA context.
    assert r.warm_gpu_gib == pytest.approx(p.awake_gib_per_gpu + p.context_gib_per_gpu, rel=0.05)


def test_wake_waits_for_busy_cotenant_then_shares_the_wake():
    d = 0.01
    p = perf(step_model(dense_weight_read_s=d))
    # m0 serves a 1000-token answer from t=0 (10 s); m1 arrives at t=1 and t=2.
    r = simulate(
        point(["host", "host"]),
        {"i0": p, "i1": p},
        trace([0.0, 1.0, 2.0], ["m0", "m1", "m1"], 100, [1000, 5, 5]),
        Slo(),
    )
    m0_done = 1000 * d
    ready = m0_done + p.sleep_s + p.wake_host_s
    assert r.wakes == 1  # the second m1 request waits behind the same wake
    np.testing.assert_allclose(r.switch_wait_s, [0, ready - 1, ready - 2])


def test_requests_for_unplaced_models_fail_and_are_counted():
    r = simulate(
        point(["gpu"]),
        {"i0": perf(step_model(dense_weight_read_s=0.01))},
        trace([0, 1, 2], ["m0", "ghost", "m0"], 100, 10),
        Slo(default=Targets(ttft_p95_s=5)),
    )
    m = r.to_metrics()
    assert m["requests"] == 3 and m["per_model"]["ghost"]["failed"] == 1
    assert m["slo_attainment"] == pytest.approx(2 / 3)
    assert r.met_slo.tolist() == [True, False, True]


def test_gpu_busy_fraction_and_warm_memory_of_always_awake_instance():
    d, k = 0.01, 10
    t = np.arange(100) * 10.0
    p = perf(step_model(dense_weight_read_s=d))
    r = simulate(point(["gpu"], gpus=[[0, 1]]), {"i0": p}, trace(t, "m0", 100, k), Slo())
    span = t[-1] + k * d - t[0]
    assert r.gpu_busy_fraction == pytest.approx(100 * k * d / span)
    assert r.warm_gpu_gib == pytest.approx(2 * p.awake_gib_per_gpu)
    assert r.warm_gpu_gib_hours == pytest.approx(2 * p.awake_gib_per_gpu * span / 3600)
    assert r.gpus_used == 2 and math.isclose(r.slo_attainment, 1.0)


@pytest.mark.parametrize(("tier", "compiled"), [("gpu", True), ("gpu", False), ("host", False)])
def test_an_idle_engine_wakes_a_busy_one_takes_the_request_in_turn(tier, compiled):
    """Request overheads split (CPU build): 9 ms for one that finds the engine idle, 4 ms for
    one that reaches it at work. Steps of 10 ms; A at 0 finds it idle: first token at 9 + 10
    ms. B at 53.5 ms joins A's batch: at the engine at 57.5 ms, its prefill rides the step
    from 59 ms, first token at 69 ms (with one 9 ms overhead: 79 ms). C at 1 s: idle again."""
    st = step_model(dense_weight_read_s=0.01)
    p = perf(st, prefill_overhead_s=0.009, busy_prefill_overhead_s=0.004)
    assert p.idle_wake_s == pytest.approx(0.005)
    idle = 1e12 if tier == "host" else None  # host: the router path; gpu: the vector path
    r = simulate(
        point([tier]),
        {"i0": p},
        trace([0.0, 0.0535, 1.0], "m0", 100, 20),
        Slo(),
        sleep_after_idle_s=idle,
        compiled=compiled,
    )
    np.testing.assert_allclose(r.ttft_s, [0.019, 0.069 - 0.0535, 0.019], atol=1e-9)
    one = simulate(
        point([tier]),
        {"i0": perf(st, prefill_overhead_s=0.009)},
        trace([0.0, 0.0535, 1.0], "m0", 100, 20),
        Slo(),
        sleep_after_idle_s=idle,
        compiled=compiled,
    )
    np.testing.assert_allclose(one.ttft_s, [0.019, 0.079 - 0.0535, 0.019], atol=1e-9)


@pytest.mark.parametrize(("tier", "compiled"), [("gpu", True), ("gpu", False), ("host", False)])
def test_an_engine_idle_longer_takes_longer_to_wake(tier, compiled):
    """The 5 ms wake-up (9 ms idle against 4 ms busy overheads) scaled by the time the
    engine was idle: none up to 10 ms of quiet, all of it from 1 s, linear between. Each
    request alone: at the engine 4 ms after it is sent, then the wake-up, a 10 ms prefill and
    19 more 10 ms steps. A at 0 finds an engine up since 0 (4 ms idle: none), finished at 204
    ms; B sent at 705 ms finds 505 ms of quiet (2.5 ms), finished at 911.5 ms; C at 912 ms
    finds 4.5 ms (none); D at 3 s all of it. Without the curve each pays all of it."""
    st = step_model(dense_weight_read_s=0.01)
    curve = ((0.01, 0.0), (1.0, 1.0))
    idle = 1e12 if tier == "host" else None  # host: the router path; gpu: the vector path
    ttft = {}
    for c in (curve, ()):
        p = perf(st, prefill_overhead_s=0.009, busy_prefill_overhead_s=0.004, idle_wake_curve=c)
        ttft[c] = simulate(
            point([tier]),
            {"i0": p},
            trace([0.0, 0.705, 0.912, 3.0], "m0", 100, 20),
            Slo(),
            sleep_after_idle_s=idle,
            compiled=compiled,
        ).ttft_s
    np.testing.assert_allclose(ttft[curve], [0.014, 0.0165, 0.014, 0.019], atol=1e-9)
    np.testing.assert_allclose(ttft[()], [0.019, 0.019, 0.019, 0.019], atol=1e-9)


def test_closed_form_pays_the_idle_overhead_alone_and_the_busy_one_among_clients():
    """The estimate's closed loop with the split overheads: one client always finds the
    engine idle (the whole 9 ms, as the simulator's engine wakes for it); four clients find
    it at work (4 ms, and wait for the running step instead)."""
    from planner.optimizer.perf.closedloop import closed_loop

    st = step_model(overhead_s=0.002, dense_weight_read_s=0.003, compute_s_per_token=1e-5)
    one = perf(st, prefill_overhead_s=0.009)
    split = perf(st, prefill_overhead_s=0.009, busy_prefill_overhead_s=0.004)
    assert closed_loop(split, 128, 32, 1).ttft_s == closed_loop(one, 128, 32, 1).ttft_s
    assert closed_loop(split, 128, 32, 4).ttft_s < closed_loop(one, 128, 32, 4).ttft_s
    assert closed_loop(split, 128, 32, 4).tpot_s == closed_loop(one, 128, 32, 4).tpot_s


@pytest.mark.parametrize(("tier", "compiled"), [("gpu", True), ("gpu", False), ("host", False)])
def test_a_request_sent_while_the_engine_wakes_misses_its_first_step(tier, compiled):
    """vLLM fixes a step's batch when the idle engine takes its first request; the wake-up
    (9 ms idle against 4 ms busy overheads: 5 ms) delays that step. A and A2 sent at 0 reach
    the engine at 4 ms and share the prefill step 9-19 ms. B sent at 2 ms reaches it during
    the wake-up, so its prefill is the next step, 19-29 ms (TTFT 27 ms, not A's 17 ms). On
    an engine without a wake-up nothing changes: B joins the step that starts as it arrives."""
    st = step_model(dense_weight_read_s=0.01)
    idle = 1e12 if tier == "host" else None
    t = trace([0.0, 0.0, 0.002], "m0", 100, 20)
    woken = perf(st, prefill_overhead_s=0.009, busy_prefill_overhead_s=0.004)
    r = simulate(point([tier]), {"i0": woken}, t, Slo(), sleep_after_idle_s=idle, compiled=compiled)
    np.testing.assert_allclose(r.ttft_s, [0.019, 0.019, 0.027], atol=1e-9)
    flat = perf(st, prefill_overhead_s=0.004)
    r = simulate(point([tier]), {"i0": flat}, t, Slo(), sleep_after_idle_s=idle, compiled=compiled)
    np.testing.assert_allclose(r.ttft_s, [0.014, 0.014, 0.022], atol=1e-9)
