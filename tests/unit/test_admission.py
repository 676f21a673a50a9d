"""One queue model (issue 30 item 4): the simulator admits requests as the gateway does
(`planner.optimizer.admission`): per awake instance max_num_seqs x admit_factor, then a queue
of `QUEUE_LIMIT`, then refused, counted as a miss by reason `refused_queue_full`."""

from __future__ import annotations

import numpy as np
import pytest
from optimizer_builders import perf, point, step_model, trace

from planner.optimizer import admission
from planner.optimizer.sim.simulator import simulate
from planner.schemas.slo import Slo

SLO = Slo(attainment=0.9, default={"ttft_p95_s": 5.0})
SEQS = 4  # max_num_seqs: the instance takes 8 at once, 72 with the queue
BOUND = admission.model_bound([admission.instance_limit(SEQS)])


def _in_system(arrival_s: np.ndarray, finish_s: np.ndarray) -> np.ndarray:
    """For each request (arrival order), how many earlier ones are still unfinished when it
    arrives: the admission count it meets."""
    ends = np.sort(finish_s)
    return np.arange(len(arrival_s)) - np.searchsorted(ends, arrival_s, side="right")


def _burst(n: int, gap_s: float, model="m0") -> dict:
    return trace(np.arange(n) * gap_s, model, 100, 200)


def _perfs(pt):
    st = step_model(overhead_s=0.01)  # 200 output tokens: ~2 s per request
    return {i.id: perf(st, max_num_seqs=SEQS) for i in pt.instances}


@pytest.mark.parametrize("tiers", [["gpu"], ["host", "host"]], ids=["alone", "router"])
def test_a_burst_beyond_the_bound_is_refused_not_queued_for_hours(tiers):
    pt = point(tiers)
    res = simulate(pt, _perfs(pt), _burst(2000, 0.001), SLO, model_names=["m0", "m1"])
    refused = res.to_metrics()["refused"]["refused_queue_full"]
    assert refused > 0
    assert res.to_metrics()["per_model"]["m0"]["refused"]["refused_queue_full"] == refused
    served = res.instance >= 0
    finish = res.arrival_s + res.e2e_s
    held = _in_system(res.arrival_s[served], finish[served])
    # never more in the gateway and engine than it admits (the engine counts a request whose
    # last step is in flight as done: one more may be admitted during that step)
    assert held.max() <= BOUND
    assert not res.met_slo[~served].any()  # a refused request is a miss
    # the queue stays bounded: no served request waited the whole burst's work
    assert np.nanmax(res.ttft_s) < 2000 * 2.0 / (2 * SEQS)


def test_below_the_bound_nothing_changes():
    pt = point(["gpu"])
    res = simulate(pt, _perfs(pt), _burst(40, 0.5), SLO)
    assert res.to_metrics()["refused"]["refused_queue_full"] == 0
    assert res.failed == 0


def test_the_gateway_uses_the_same_bound():
    from planner.adjuster.gateway.server import GatewayConfig

    cfg = GatewayConfig()
    assert (cfg.queue_limit, cfg.admit_factor) == (admission.QUEUE_LIMIT, admission.ADMIT_FACTOR)
    assert admission.instance_limit(16, cfg.admit_factor) == 32


def _compiled() -> list[bool]:
    from planner.optimizer.sim.kernel import AVAILABLE

    return [False, True] if AVAILABLE else [False]


def test_replicas_that_never_sleep_refuse_as_the_router_does():
    # compiled: one call for the model (`sim.replicas`), counting in its loop; pure Python:
    # the router's path, request by request (`sim.admit.Admission`)
    pt = point(["gpu", "gpu"], ["m0", "m0"], [[0], [1]])
    runs = [
        simulate(pt, _perfs(pt), _burst(3000, 0.001), SLO, model_names=["m0"], compiled=c)
        for c in _compiled()
    ]
    assert runs[0].to_metrics()["refused"]["refused_queue_full"] > 0
    for r in runs[1:]:
        assert np.array_equal(r.instance, runs[0].instance)
        assert np.array_equal(r.ttft_s, runs[0].ttft_s, equal_nan=True)


@pytest.mark.parametrize("compiled", _compiled())
def test_a_session_whose_calls_were_all_refused_finds_no_prefix_cached(compiled):
    # a burst of first calls, one session each, then each session's second call after the
    # burst has drained: only those whose first call was served find their prefix cached
    n = 400
    t = np.concatenate([np.arange(n) * 0.001, 10_000.0 + np.arange(n) * 100.0])
    sess = [f"s{k}" for k in range(n)] * 2
    tr = trace(t, "m0", 100, 200, session=sess, cached=[0] * n + [50] * n)
    pt = point(["gpu"])
    res = simulate(pt, _perfs(pt), tr, SLO, model_names=["m0"], compiled=compiled)
    first_served = res.instance[:n] >= 0
    assert not first_served.all()
    assert np.array_equal(res.cache_hit[n:], first_served)
