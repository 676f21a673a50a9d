"""No thrash (issue 29, item 6) and a waiting stream hears something (item 8).

Two host-tier models on one GPU that cannot be awake together, asked for alternately: the
gateway (fake engines: the wake is the fake's, the rule is the real one) and the simulator's
router apply one rule (`optimizer/swap.py`): collate, keep a woken model awake `min_awake_s`
unless a waiting request's deadline says otherwise, never sleep a busy model.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from gateway_fakes import inst, post, wait_in_flight
from optimizer_builders import perf, point, step_model, trace

from planner.optimizer import swap
from planner.optimizer.sim.simulator import simulate
from planner.schemas.slo import Slo, Targets

# ----------------------------------------------------------------------------- the rule


def test_a_recently_woken_victim_defers_the_swap_until_its_minimum_or_the_deadline():
    woke = {"a": 100.0}
    at = swap.swap_at_s(["a"], now_s=101.0, deadline_s=200.0, woke_s=woke.get, min_awake_s=10.0)
    assert at == 110.0
    assert swap.swap_at_s(["a"], now_s=101.0, deadline_s=105.0, woke_s=woke.get) == 105.0
    assert swap.swap_at_s(["a"], now_s=106.0, deadline_s=105.0, woke_s=woke.get) == 106.0
    assert swap.swap_at_s(["a"], now_s=120.0, deadline_s=200.0, woke_s=woke.get) == 120.0
    assert swap.swap_at_s([], now_s=1.0, deadline_s=2.0, woke_s=woke.get) == 1.0
    # awake from the start: not protected; busy: wait (look again) up to the deadline
    assert swap.swap_at_s(["a"], now_s=1.0, deadline_s=9.0, woke_s=lambda v: -math.inf) == 1.0
    busy = swap.swap_at_s(
        ["a"], now_s=1.0, deadline_s=9.0, woke_s=lambda v: -math.inf, busy=lambda v: True
    )
    assert busy == 9.0


def test_the_deadline_is_the_switch_slo_less_the_wake_capped_by_the_max_wait():
    assert swap.swap_deadline_s(50.0, 2.0, None, max_wait_s=10.0) == 60.0
    assert swap.swap_deadline_s(50.0, 2.0, 5.0, max_wait_s=10.0) == 53.0
    assert swap.swap_deadline_s(50.0, 8.0, 5.0, max_wait_s=10.0) == 50.0  # SLO: swap now


# ----------------------------------------------------------------------------- simulator

P = perf(step_model(overhead_s=0.001))


def _alternating(n: int = 20, gap_s: float = 0.25) -> dict:
    return trace([k * gap_s for k in range(n)], [f"m{k % 2}" for k in range(n)], 50, 5)


def test_the_simulator_collates_an_alternating_client_into_few_wakes():
    pt = point(["host", "host"])  # one GPU, one lazy instance awake at a time
    r = simulate(pt, {"i0": P, "i1": P}, _alternating(), Slo())
    assert r.wakes <= 4  # without the rule: one per request after the first
    assert r.ttft_s.max() <= swap.MAX_WAIT_S + 2 * P.wake_host_s + P.sleep_s + 1.0  # nobody starves


def test_in_the_simulator_a_waiting_requests_slo_takes_a_fresh_models_memory():
    pt = point(["host", "host"])
    tight = Slo(default=Targets(switch_p95_s=P.wake_host_s))  # no time to spare: swap now
    r = simulate(pt, {"i0": P, "i1": P}, _alternating(), tight)
    assert r.wakes >= 10


def test_lru_baseline_keeps_reactive_swapping():
    pt = point(["host", "host"])
    one = {("n", 0): 20.0}  # one instance awake (16 GiB) beside the other's context
    r = simulate(pt, {"i0": P, "i1": P}, _alternating(), Slo(), policy="lru", gpu_memory_gib=one)
    assert r.wakes >= 10  # the baseline the rule is measured against


# ----------------------------------------------------------------------------- gateway


def _metric(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.split()[-1])
    return 0.0


def test_the_gateway_collates_an_alternating_client_into_few_wakes(setup):
    a0, b0 = inst("a0", "a", [0]), inst("b0", "b", [0])
    th, ctl = setup([a0, b0], {"a0"}, wake_delay_s=0.3, min_awake_s=3.0, swap_max_wait_s=3.0)
    with ThreadPoolExecutor(20) as ex:
        futs = []
        for k in range(20):  # an agent alternating two models, not waiting for answers
            futs.append(ex.submit(post, th, model="ab"[k % 2], prompt="x"))
            time.sleep(0.25)
        codes = [f.result().status_code for f in futs]
    assert codes == [200] * 20
    wakes = [c for c in ctl.calls if c[0] == "wake"]
    assert len(wakes) <= 4, ctl.calls  # before the rule: 19
    text = httpx.get(th.url + "/metrics").text
    assert _metric(text, 'planner_gateway_wakes_total{model="b"}') >= 1
    assert _metric(text, 'planner_gateway_sleeps_total{model="a"}') >= 1


def test_a_busy_model_is_never_put_to_sleep(setup):
    a0, b0 = inst("a0", "a", [0]), inst("b0", "b", [0])
    th, ctl = setup([a0, b0], {"a0"}, drain_timeout_s=0.2, swap_max_wait_s=0.0)
    with ThreadPoolExecutor(2) as ex:
        long = ex.submit(post, th, model="a", prompt="x", delay_s=1.5)
        wait_in_flight(ctl.engines["a0"])
        other = post(th, model="b", prompt="x")
        assert long.result().status_code == 200  # finished, not cut off by the swap
    assert other.status_code == 200
    assert ctl.calls == [("sleep", "a0"), ("wake", "b0")]


def test_a_stream_waiting_for_a_wake_hears_comments(setup):
    a0, b0 = inst("a0", "a", [0]), inst("b0", "b", [0])
    th, _ = setup([a0, b0], {"a0"}, wake_delay_s=2.0, wake_notice_s=0.4)
    got: list[str] = []
    body = {"model": "b", "prompt": "x", "stream": True}
    with httpx.stream("POST", th.url + "/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        got = [line for line in r.iter_lines() if line]
    comments = [g for g in got if g.startswith(":")]
    assert len(comments) >= 2 and comments[0].startswith(": waking b, ")
    first_data = next(k for k, g in enumerate(got) if g.startswith("data:"))
    assert all(g.startswith(":") for g in got[:first_data])  # heard before the answer
    assert got[-1] == "data: [DONE]"
    # a client that does not stream hears nothing until the answer
    assert post(th, model="a", prompt="x").json()["served_by"] == "a0"


def test_a_stream_whose_wake_fails_gets_the_error_as_an_event(setup):
    a0, b0 = inst("a0", "a", [0]), inst("b0", "b", [0])
    th, ctl = setup([a0, b0], {"a0"}, wake_delay_s=1.5, wake_notice_s=0.3)
    boom = threading.Event()
    real_wake = ctl.wake

    def failing_wake(iid: str, timeout_s: float):
        boom.set()
        time.sleep(1.0)
        raise RuntimeError("no memory")

    ctl.wake = failing_wake
    body = {"model": "b", "prompt": "x", "stream": True}
    r = httpx.post(th.url + "/v1/completions", json=body, timeout=30)
    ctl.wake = real_wake
    assert boom.is_set() and r.status_code == 200  # the stream had begun
    assert r.text.startswith(": waking b")
    assert '"error"' in r.text and "no memory" in r.text


@pytest.mark.parametrize("n", [1])
def test_metrics_name_sleeps_per_model(setup, n):
    th, _ = setup([inst("a0", "a", [0])], {"a0"})
    assert "planner_gateway_sleeps_total" in httpx.get(th.url + "/metrics").text
