"""The common case in callbacks (exchange.py) answers, fails and ends as the general path does.

A non-streamed request whose body came whole, for an awake instance with a free slot and a
kept-alive connection, runs with no task (`Proxy.fast`); the first request to an engine has
no kept-alive connection yet and runs as a task, so each test warms the connection first and
checks, with a spy on `Proxy.fast`, that the request it looks at took the callbacks. The
same faults against the general path: test_gateway_faults.py.
"""

from __future__ import annotations

import time

import httpx
import pytest
from gateway_fakes import inst, leave_after_headers, post, wait_rows
from waits import wait_until

from planner.adjuster.gateway.proxy import Proxy


@pytest.fixture
def fast(monkeypatch):
    """`Proxy.fast`'s verdicts, in order (True: the request ran in callbacks); the real
    method runs. Taken before the gateway starts (its server keeps the bound method)."""
    seen: list[bool] = []
    real = Proxy.fast

    def spy(self, request):
        took = real(self, request)
        seen.append(took)
        return took

    monkeypatch.setattr(Proxy, "fast", spy)
    return seen


def _warm(th) -> None:
    assert post(th, model="a", prompt="warm").status_code == 200


def test_the_common_case_answers_and_logs_as_a_task_does(setup, tmp_path, fast):
    th, _ = setup([inst("a0", "a", [0])], {"a0"})
    headers = {"X-User": "ann", "X-Session": "s1"}
    first = post(th, model="a", prompt="hi", headers=headers)  # no kept-alive connection yet
    second = post(th, model="a", prompt="hi", headers=headers)
    assert fast == [False, True]
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    for name in ("content-type", "x-planner-served-by"):
        assert first.headers[name] == second.headers[name]
    a, b = wait_rows(tmp_path, 2)
    kept = ("user", "session", "model", "input_tokens", "output_tokens", "cached_tokens")
    assert [a[k] for k in kept] == [b[k] for k in kept] == ["ann", "s1", "a", 7, 3, 2]
    assert a["instance"] == b["instance"] == "a0" and b["latency_s"] >= b["ttft_s"] > 0


def test_what_is_not_the_common_case_runs_as_a_task(setup, tmp_path, fast):
    th, _ = setup([inst("a0", "a", [0])], {"a0"})
    _warm(th)
    r = post(th, model="a", prompt="x", stream=True)
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    assert post(th, model="zzz", prompt="x").status_code == 404
    assert post(th, model="a", prompt="x", stream="yes").status_code == 400
    assert fast == [False, False, False, False]
    assert post(th, model="a", prompt="x").status_code == 200 and fast[-1]


def test_a_client_that_leaves_aborts_the_engine_request_and_logs_499(setup, tmp_path, fast):
    th, ctl = setup([inst("a0", "a", [0], "gpu")], {"a0"})
    eng = ctl.engines["a0"]
    _warm(th)
    leave_after_headers(th.url, {"model": "a", "prompt": "x", "delay_s": 60}, eng)
    wait_until(lambda: eng.aborted == 1, "the engine's handler cancelled")
    assert fast == [False, True] and eng.running == 0
    (row,) = wait_rows(tmp_path, 1, "failures")
    assert (row["status"], row["error"]) == (499, "client gone")
    text = httpx.get(th.url + "/metrics").text
    assert 'planner_gateway_requests_total{model="a",status="499"} 1' in text
    assert post(th, model="a", prompt="x").status_code == 200  # its slot was given back


def test_a_request_past_its_timeout_is_502_and_the_engine_aborts_it(setup, tmp_path, fast):
    th, ctl = setup([inst("a0", "a", [0], "gpu")], {"a0"}, request_timeout_s=0.5)
    eng = ctl.engines["a0"]
    _warm(th)
    t = time.monotonic()
    r = post(th, model="a", prompt="x", delay_s=30)
    assert fast == [False, True]
    assert r.status_code == 502 and "no answer within 0.5 s" in r.json()["error"]["message"]
    assert time.monotonic() - t < 10  # the deadline, not the engine, ended it
    wait_until(lambda: eng.aborted == 1, "the engine's handler cancelled")
    (row,) = wait_rows(tmp_path, 1, "failures")
    assert row["status"] == 502 and "no answer within 0.5 s" in row["error"]
    assert post(th, model="a", prompt="x").status_code == 200


def test_a_dying_engines_500_is_retried_a_live_engines_is_passed_on(setup, tmp_path, fast):
    th, ctl = setup([inst("a0", "a", [0], "gpu")], {"a0"}, health_interval_s=60)
    _warm(th)
    r = post(th, model="a", prompt="x", die_once="k-exchange")  # dies answering 500
    assert fast == [False, True]
    assert r.status_code == 200 and r.json()["served_by"] == "a0"
    assert ctl.calls == [("restart", "a0")]  # found dead, restarted, the request tried again
    _warm(th)
    r = post(th, model="a", prompt="x", error_500=True)  # a live engine's own error
    assert fast[-1] and r.status_code == 500 and r.json()["error"]["message"] == "boom"
    assert ctl.calls == [("restart", "a0")]
    fails = wait_rows(tmp_path, 1, "failures")
    assert [(f["status"], f["error"]) for f in fails] == [(500, "engine error")]
