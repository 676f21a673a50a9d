"""Tier policies: LRU eviction by memory, idle timeout, routing across replicas, perfs of a point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from optimizer_builders import perf, point, step_model, trace

from planner.optimizer import baselines
from planner.optimizer.sim.perfs import perfs_for_point
from planner.optimizer.sim.simulator import simulate
from planner.schemas import load_cluster, load_models
from planner.schemas.slo import Slo, Targets

D = 0.01
P = perf(step_model(dense_weight_read_s=D))  # awake 16 GiB per GPU, context 0.5 GiB


def test_lru_evicts_the_least_recently_used_only_when_memory_is_short():
    # 40 GiB GPU: two of the three 16 GiB models fit awake at once.
    pt = point(["host"] * 3)
    perfs = {i.id: P for i in pt.instances}
    t = [10, 20, 30, 40, 50]
    tr = trace(t, ["m0", "m1", "m2", "m1", "m0"], 100, 5)
    r = simulate(pt, perfs, tr, Slo(), policy="lru", gpu_memory_gib={("n", 0): 40.0})
    switch = P.sleep_s + P.wake_host_s
    # m0, m1 start awake; m2 evicts m0 (used at 10, before m1 at 20); m1 still awake;
    # m0 then evicts m2 (used at 30, before m1 at 40).
    np.testing.assert_allclose(r.switch_wait_s, [0, 0, switch, 0, switch])
    assert r.wakes == 2
    # The plan policy puts every co-tenant to sleep instead: only one model awake at a time.
    r2 = simulate(pt, perfs, tr, Slo())
    assert r2.wakes == 4


def test_idle_timeout_puts_a_lone_model_to_sleep():
    pt = point(["host"])
    tr = trace([0.0, 10.0, 500.0], "m0", 100, 5)
    r = simulate(pt, {"i0": P}, tr, Slo(), sleep_after_idle_s=60.0)
    np.testing.assert_allclose(r.switch_wait_s, [0, 0, P.wake_host_s])
    assert r.wakes == 1 and r.sleeps == 1
    awake_s = (10 + 5 * D + 60 + P.sleep_s) + (r.end_s - (500 + 0))
    span = r.end_s - r.start_s
    want = (awake_s * P.awake_gib_per_gpu + (span - awake_s) * P.context_gib_per_gpu) / span
    assert r.warm_gpu_gib == pytest.approx(want, rel=1e-6)


def test_replicas_share_load_by_outstanding_requests():
    pt = point(["gpu", "gpu"], models=["m0", "m0"], gpus=[[0], [1]])
    # Three long requests at once: the second goes to the idle replica, the third to the
    # replica with fewer outstanding (tie -> plan order).
    tr = trace([0.0, 0.0, 0.0], "m0", 100, 1000)
    r = simulate(pt, {"i0": P, "i1": P}, tr, Slo())
    assert r.instance.tolist() == [0, 1, 0]
    assert r.to_metrics()["gpus_used"] == 2


def test_perfs_for_point_matches_the_baseline_builder():
    lab = Path(__file__).resolve().parents[2] / "plans" / "examples" / "lab16"
    cluster, models = load_cluster(lab / "cluster.yaml"), load_models(lab / "models.yaml")
    for b in (baselines.static(cluster, models), baselines.lru(cluster, models)):
        perfs = perfs_for_point(b.point, cluster, models)
        assert set(perfs) == {i.id for i in b.point.instances}
        for k, p in perfs.items():
            assert p.kv_gib_per_gpu == pytest.approx(b.perfs[k].kv_gib_per_gpu, abs=1e-3)
            assert p.max_kv_tokens == pytest.approx(b.perfs[k].max_kv_tokens, rel=1e-3)


def test_prefix_survives_a_sleep_only_in_the_cpu_kv_tier():
    st = step_model(dense_weight_read_s=D, compute_s_per_token=1e-4)
    p = perf(st)
    tr = trace(
        [0.0, 100.0, 200.0],
        ["m0", "m1", "m0"],
        5000,
        5,
        session=["s", "x", "s"],
        cached=[0, 0, 4000],
    )
    base = point(["host", "host"])
    plain = simulate(base, {"i0": p, "i1": p}, tr, Slo())
    offl = base.model_copy(deep=True)
    offl.instances[0].kv_cpu_offload_gib = 4.0  # 4 GiB / 1e5 B per token: ~43k tokens
    kept = simulate(offl, {"i0": p, "i1": p}, tr, Slo())
    assert not plain.cache_hit[2] and kept.cache_hit[2]
    h2d = p.wake_host_s / (p.weights_host_gib * 2**30) * p.kv_bytes_per_token  # s per token
    saved = 4000 * 1e-4 - 4000 * h2d  # prefill skipped minus the copy back
    assert plain.ttft_s[2] - kept.ttft_s[2] == pytest.approx(saved, rel=1e-6)
    assert plain.switch_wait_s[2] == kept.switch_wait_s[2] > 0


def test_idle_cotenant_is_already_asleep_when_another_model_wakes():
    pt = point(["host", "host"])
    tr = trace([0.0, 500.0], ["m0", "m1"], 100, 5)
    r = simulate(pt, {"i0": P, "i1": P}, tr, Slo(), sleep_after_idle_s=60.0)
    # m0 slept at ~60 s by itself: m1 waits for its own wake only, not for m0's sleep.
    np.testing.assert_allclose(r.switch_wait_s, [0, P.wake_host_s])
    assert r.sleeps == 1 and r.wakes == 1  # m0 after its idle time; m1 is awake at the end


def test_slo_ttft_target_excludes_the_wake_the_switch_target_bounds():
    pt = point(["host", "host"])
    tr = trace([0.0, 100.0], ["m0", "m1"], 100, 5)
    wait = P.sleep_s + P.wake_host_s  # 2.5 s
    ok = Slo(default=Targets(ttft_p95_s=1.0, switch_p95_s=3.0))
    late = Slo(default=Targets(ttft_p95_s=1.0, switch_p95_s=2.0))
    assert simulate(pt, {"i0": P, "i1": P}, tr, ok).met_slo.tolist() == [True, True]
    r = simulate(pt, {"i0": P, "i1": P}, tr, late)
    assert r.met_slo.tolist() == [True, False] and r.ttft_s[1] == pytest.approx(wait + D)
