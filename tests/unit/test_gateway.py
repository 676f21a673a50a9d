"""Gateway behaviour against fake engines and a fake InstanceControl (no vLLM, fast).

The fakes (gateway_fakes.py) and the `setup` fixture that starts a gateway over them
(conftest.py) are shared with the other gateway tests.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from gateway_fakes import inst, post, rows, wait_in_flight, wait_rows
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.adjuster.gateway import (
    SseUsage,
    identity,
    overlaps,
)
from planner.adjuster.gateway.h1server import loop_factory
from planner.trace.frame import read_trace


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_gateway_runs_on_uvloop_and_on_asyncios_loop_without_it(setup, monkeypatch):
    """uvloop's loop when it can be imported (less CPU per request, issue 43), else
    asyncio's: the gateway serves on either."""
    pytest.importorskip("uvloop")
    th, _ = setup([inst("a0", "a", [0])], {"a0"})
    assert th.call(_loop_module()).startswith("uvloop")
    assert post(th, model="a", prompt="hi").status_code == 200
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if not installed
    assert loop_factory() is None
    th, _ = setup([inst("a0", "a", [0])], {"a0"})
    assert th.call(_loop_module()).startswith("asyncio")
    assert post(th, model="a", prompt="hi").status_code == 200


def test_completion_is_proxied_and_logged_as_a_trace(setup, tmp_path):
    th, _ = setup([inst("a0", "a", [0])], {"a0"})
    r = post(th, model="a", prompt="hi", headers={"X-User": "ann", "X-Session": "s1"})
    assert r.status_code == 200
    assert r.json()["served_by"] == "a0"
    (row,) = wait_rows(tmp_path, 1)
    assert (row["user"], row["session"], row["model"]) == ("ann", "s1", "a")
    assert (row["input_tokens"], row["output_tokens"], row["cached_tokens"]) == (7, 3, 2)
    assert row["status"] == 200 and row["instance"] == "a0"
    assert row["latency_s"] >= row["ttft_s"] > 0 and abs(row["timestamp"] - time.time()) < 60
    df = read_trace(tmp_path / "requests.sqlite", model_names=["a"])
    assert list(df["model"]) == ["a"] and int(df["cached_tokens"][0]) == 2


def test_stream_hides_the_usage_chunk_it_asked_for(setup, tmp_path):
    th, _ = setup([inst("a0", "a", [0])], {"a0"})
    r = post(th, path="/v1/chat/completions", model="a", messages=[], stream=True)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in r.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert not any('"usage"' in e for e in events)
    assert "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1]) == "abc"
    # A client that asks for usage gets it.
    r = post(th, model="a", prompt="x", stream=True, stream_options={"include_usage": True})
    assert sum('"usage"' in e for e in r.text.split("\n\n")) == 1
    got = wait_rows(tmp_path, 2)
    assert all(g["output_tokens"] == 3 and g["input_tokens"] == 7 for g in got)


def test_unknown_model_is_404_listing_models(setup, tmp_path):
    th, _ = setup([inst("a0", "a", [0]), inst("b0", "b", [1])], {"a0"})
    r = post(th, model="zzz", prompt="x")
    assert r.status_code == 404
    assert r.json()["error"]["models"] == ["a", "b"]
    assert [m["id"] for m in httpx.get(th.url + "/v1/models").json()["data"]] == ["a", "b"]
    assert post(th, prompt="no model").status_code == 400
    assert wait_rows(tmp_path, 1, "failures")[0]["status"] == 404
    assert rows(tmp_path) == []


def test_wake_drains_and_sleeps_the_cotenant_first(setup, tmp_path):
    a0, b0 = inst("a0", "a", [0, 1]), inst("b0", "b", [1, 2])
    other = inst("c0", "c", [1], node="n2")  # same GPU index, other node: not a co-tenant
    th, ctl = setup([a0, b0, other], {"a0", "c0"})
    with ThreadPoolExecutor(2) as ex:
        slow = ex.submit(post, th, model="a", prompt="x", delay_s=0.5)
        wait_in_flight(ctl.engines["a0"])  # the slow request is in flight on a0
        r = post(th, model="b", prompt="x")
        assert slow.result().status_code == 200  # drained, not cut off
    assert r.status_code == 200 and r.json()["served_by"] == "b0"
    assert ctl.calls == [("sleep", "a0"), ("wake", "b0")]
    row = next(g for g in wait_rows(tmp_path, 2) if g["model"] == "b")
    assert row["switch_wait_s"] > 0
    # And back: a wakes, b goes to sleep.
    assert post(th, model="a", prompt="x").json()["served_by"] == "a0"
    assert ctl.calls[2:] == [("sleep", "b0"), ("wake", "a0")]
    text = httpx.get(th.url + "/metrics").text
    assert 'planner_gateway_wakes_total{model="b"} 1' in text
    assert 'planner_gateway_awake_instances{model="a"} 1' in text
    assert 'planner_gateway_requests_total{model="a",status="200"} 2' in text


def test_an_instance_put_to_sleep_is_not_restarted_by_the_health_loop(setup):
    # The health loop probes a0 while the wake of b stops it: the refused probe must not
    # read as a death, or a0 is restarted after b wakes and puts b back to sleep.
    th, ctl = setup(
        [inst("a0", "a", [0]), inst("b0", "b", [0])],
        {"a0"},
        sleep_delay_s=0.5,
        health_interval_s=0.02,
        backoff_base_s=0.01,
    )
    assert post(th, model="a", prompt="x").status_code == 200  # a0 is the gateway's now
    r = post(th, model="b", prompt="x")
    assert r.status_code == 200 and r.json()["served_by"] == "b0"
    time.sleep(1.0)  # room for a wrongful restart to happen
    assert ctl.calls == [("sleep", "a0"), ("wake", "b0")]
    assert post(th, model="b", prompt="x").json()["served_by"] == "b0"


def test_one_wake_per_model_and_a_bounded_queue(setup, tmp_path):
    th, ctl = setup([inst("a0", "a", [0])], set(), wake_delay_s=3.0, queue_limit=3)
    with ThreadPoolExecutor(5) as ex:
        futs = [ex.submit(post, th, model="a", prompt="x") for _ in range(3)]
        # the late two are sent once the first three wait (not after a fixed sleep: a loaded
        # machine may take longer than the wake to get them there)
        pool = th.gateway.pool
        deadline = time.monotonic() + 10
        while pool.waiting["a"] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        late = [ex.submit(post, th, model="a", prompt="x") for _ in range(2)]
        codes = [f.result().status_code for f in futs]
        rejected = [f.result() for f in late]
    assert codes == [200, 200, 200]
    assert [r.status_code for r in rejected] == [503, 503]
    assert int(rejected[0].headers["Retry-After"]) >= 1
    assert ctl.calls == [("wake", "a0")]


def test_least_outstanding_routing(setup):
    th, _ = setup([inst("a0", "a", [0], "gpu"), inst("a1", "a", [1], "gpu")], {"a0", "a1"})
    with ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(post, th, model="a", prompt="x", delay_s=0.4) for _ in range(4)]
        served = sorted(f.result().json()["served_by"] for f in futs)
    assert served == ["a0", "a0", "a1", "a1"]


def test_dead_instance_is_restarted(setup):
    th, ctl = setup(
        [inst("a0", "a", [0], "gpu")], {"a0"}, health_interval_s=0.1, backoff_base_s=0.1
    )
    ctl.kill("a0")
    deadline = time.monotonic() + 10
    while ("restart", "a0") not in ctl.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ("restart", "a0") in ctl.calls
    deadline = time.monotonic() + 10
    while post(th, model="a", prompt="x").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert 'planner_gateway_restarts_total{engine="a0"} 1' in httpx.get(th.url + "/metrics").text


def test_refused_connection_restarts_on_the_request_path(setup):
    # A long health period: the request itself finds the instance dead and wakes it.
    th, ctl = setup([inst("a0", "a", [0])], {"a0"}, health_interval_s=60)
    ctl.kill("a0")
    r = post(th, model="a", prompt="x")
    assert r.status_code == 200 and ctl.calls == [("restart", "a0")]


def test_identity_and_overlap():
    # (headers by lower-case name, as the server's Headers hold them)
    assert identity({"x-user": "u", "x-session": "s"}, b"k" * 32) == ("u", "s")
    user, session = identity({"authorization": "Bearer sk-secret"}, b"k" * 32)
    assert user.startswith("key-") and "secret" not in user and session == ""
    assert identity({}, b"k" * 32) == ("", "")
    a, b = inst("a", "m", [0, 1]), inst("b", "m", [1])
    assert overlaps(a, b) and not overlaps(a, inst("c", "m", [1], node="n2"))
    assert not overlaps(inst("d", "m", []), inst("e", "m", []))


_EVENTS = [
    b'data: {"choices": [{"text": "a"}]}',
    b'data: {"choices": [{"text": "b\\n\\nc"}]}',
    b'data: {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}',
    b"data: [DONE]",
]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, 200), max_size=8), strip=st.booleans())
def test_sse_usage_passes_any_chunking_through(cuts, strip):
    stream = b"".join(e + b"\n\n" for e in _EVENTS)
    bounds = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[i:j] for i, j in zip([0, *bounds], [*bounds, len(stream)], strict=True)]
    sse = SseUsage(strip)
    out = b"".join(sse.feed(c) for c in chunks) + sse.close()
    want = [e for e in _EVENTS if not (strip and b"usage" in e)]
    assert out == b"".join(e + b"\n\n" for e in want)
    assert sse.usage == {"prompt_tokens": 4, "completion_tokens": 2}


def test_instance_started_elsewhere_is_adopted(setup):
    th, ctl = setup([inst("a0", "a", [0])], set(), health_interval_s=0.05, adopt_every=2)
    ctl._start("a0")  # e.g. `planner apply` started it after the gateway came up
    deadline = time.monotonic() + 10
    while "a0" not in httpx.get(th.url + "/health").text or (
        httpx.get(th.url + "/health").json()["instances"]["a0"]["status"] != "awake"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert post(th, model="a", prompt="x").status_code == 200
    assert ctl.calls == []  # served without a wake


def test_cli_rejects_bad_inputs_with_exit_2(tmp_path, capsys):
    from planner.app.example import CPU_FILES
    from planner.cli.main import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: plan\nversion: 1\nselected: x\npoints: []\n")
    with pytest.raises(SystemExit) as e:
        main(["gateway", "--plan", str(bad), "--state-dir", str(tmp_path / "s")])
    assert e.value.code == 2
    for name, text in CPU_FILES.items():
        (tmp_path / name).write_text(text)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "kind: plan\nversion: 1\nselected: p\n"
        "inputs: {cluster: {path: cluster.yaml}, models: {path: models.yaml}}\n"
        "points: [{name: p, instances: []}]\n"
    )
    with pytest.raises(SystemExit) as e:
        main(
            ["gateway", "--plan", str(plan), "--point", "nope", "--state-dir", str(tmp_path / "s")]
        )
    assert e.value.code == 2
    assert "no point 'nope'" in capsys.readouterr().err


def test_engine_errors_pass_through_and_are_logged_as_failures(setup, tmp_path):
    th, _ = setup([inst("a0", "a", [0])], {"a0"})
    r = post(th, model="a", prompt="x", bad=True, stream=True)
    assert r.status_code == 400 and r.json()["error"]["message"] == "bad request"
    (row,) = wait_rows(tmp_path, 1, "failures")
    assert (row["model"], row["status"]) == ("a", 400)
    assert rows(tmp_path) == []


@pytest.mark.parametrize(
    "answer",
    [
        {"id": "x", "choices": [{"text": 'the "usage": {1}'}], "usage": {"prompt_tokens": 3}},
        {"choices": [{"text": "usage"}], "usage": {"prompt_tokens": 2}, "kv_transfer_params": None},
        {"object": "response", "response": {"usage": {"input_tokens": 5}}},
        {"data": [], "usage": None},
        {"choices": [{"message": {"content": "x", "usage": 1}}], "usage": {"prompt_tokens": 4}},
        {"choices": []},
    ],
)
def test_usage_of_an_answer_is_what_the_whole_parse_finds(answer):
    from planner.adjuster.gateway.sse import usage_in, usage_of

    data = json.dumps(answer).encode()
    assert usage_in(data) == usage_of(answer)
