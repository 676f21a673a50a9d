"""`/v1/embeddings` and `/v1/responses` through the gateway, against the fake engines of
gateway_fakes.py (the real vLLM-CPU engines: tests/integration/test_operations_tour.py)."""

from __future__ import annotations

import json

import httpx
from gateway_fakes import inst, post, wait_rows


def embed_inst(iid: str, model: str, gpus: list[int]):
    """An instance of an embedding model (what the optimizer plans for `task: embed`)."""
    spec = inst(iid, model, gpus)
    engine = spec.engine.model_copy(update={"extra_args": ["--runner", "pooling"]})
    return spec.model_copy(update={"engine": engine})


def test_embeddings_are_proxied_and_logged(setup, tmp_path):
    th, _ = setup([embed_inst("e0", "emb", [0])], {"e0"})
    r = post(th, "/v1/embeddings", model="emb", input="hello", headers={"X-User": "ann"})
    assert r.status_code == 200, r.text
    assert r.json()["data"][0]["embedding"] == [0.5, -0.5]
    assert r.headers["X-Planner-Served-By"] == "emb"
    (row,) = wait_rows(tmp_path, 1)
    assert (row["user"], row["model"], row["status"]) == ("ann", "emb", 200)
    assert (row["input_tokens"], row["output_tokens"]) == (5, 1)  # no output: counted as 1


def test_responses_are_proxied_streamed_and_their_usage_logged(setup, tmp_path):
    th, ctl = setup([inst("r0", "coder", [0])], {"r0"})
    r = post(th, "/v1/responses", model="coder", input="hi", headers={"X-Session": "s9"})
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["text"] == "ab"
    r = post(th, "/v1/responses", model="coder", input="hi", stream=True)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in r.text.split("\n\n") if e]
    assert [e.split("\n")[0] for e in events] == [
        "event: response.created",
        "event: response.output_text.delta",
        "event: response.completed",
    ]
    last = json.loads(events[-1].split("\n")[1][6:])
    assert last["response"]["usage"]["output_tokens"] == 4  # passed on, not stripped
    # the Responses API has no stream_options: the gateway adds none
    assert all("stream_options" not in b for b in ctl.engines["r0"].bodies)
    got = wait_rows(tmp_path, 2)
    assert [(g["input_tokens"], g["output_tokens"], g["cached_tokens"]) for g in got] == [
        (6, 4, 1),
        (6, 4, 1),
    ]
    assert got[0]["session"] == "s9"


def test_new_routes_wake_a_sleeping_model_and_answer_405_to_get(setup, tmp_path):
    th, ctl = setup([embed_inst("e0", "emb", [0]), inst("c0", "coder", [0])], {"c0"})
    r = post(th, "/v1/embeddings", model="emb", input=["a", "b"])
    assert r.status_code == 200, r.text
    assert ("sleep", "c0") in ctl.calls and ("wake", "e0") in ctl.calls
    assert ctl.calls.index(("sleep", "c0")) < ctl.calls.index(("wake", "e0"))
    r = httpx.get(th.url + "/v1/responses", timeout=10)
    assert r.status_code == 405 and r.headers["Allow"] == "POST"
    r = post(th, "/v1/embeddings", model="nope", input="x")
    assert r.status_code == 404 and r.json()["error"]["models"] == ["coder", "emb"]


def test_head_of_a_get_route_and_expect_100_continue_are_answered(setup):
    """What aiohttp's router answered before the gateway's own route table: HEAD of a GET
    route; `Expect: 100-continue` before the body is sent (curl sends it for large bodies),
    and 417 for another expectation."""
    import socket

    th, _ = setup([inst("a0", "a", [0])], {"a0"})
    r = httpx.head(th.url + "/health")
    assert r.status_code == 200 and r.content == b""
    assert httpx.head(th.url + "/v1/completions").status_code == 405
    body = json.dumps({"model": "a", "prompt": "hi"}).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
    ).encode()
    host, port = th.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(head)
        assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the body
        s.sendall(body)
        got = b""
        while b'"served_by"' not in got:
            got += s.recv(4096)
        assert got.startswith(b"HTTP/1.1 200")
    r = httpx.post(th.url + "/v1/completions", content=body, headers={"Expect": "magic"})
    assert r.status_code == 417 and "magic" in r.json()["error"]["message"]


def test_a_call_of_another_task_gets_a_400_naming_the_models_task(setup, tmp_path):
    """Issue 42 item 5. Before: vLLM's bare `{"detail": "Not Found"}` came back."""
    th, ctl = setup([embed_inst("e0", "emb", [0]), inst("c0", "coder", [1])], {"e0", "c0"})
    r = post(th, "/v1/chat/completions", model="emb", messages=[{"role": "user", "content": "x"}])
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "BadRequestError" and err["param"] == "model"
    assert "task: embed" in err["message"] and "/v1/chat/completions" in err["message"]
    r = post(th, "/v1/embeddings", model="coder", input="x")
    assert r.status_code == 400 and "task: generate" in r.json()["error"]["message"]
    assert ctl.engines["e0"].bodies == [] and ctl.engines["c0"].bodies == []  # none forwarded


def test_a_models_task_follows_the_point_in_force(setup):
    """The wrong-task verdict is judged once per spec, not per request (proxy.py): a point
    in force that makes the embedding model a generate model is followed at once."""
    from planner.schemas.plan import Point

    emb = embed_inst("e0", "emb", [0])
    th, ctl = setup([emb], {"e0"}, health_interval_s=60)
    chat = {"messages": [{"role": "user", "content": "x"}]}
    assert post(th, "/v1/chat/completions", model="emb", **chat).status_code == 400
    assert post(th, "/v1/chat/completions", model="emb", **chat).status_code == 400
    plain = emb.engine.model_copy(update={"extra_args": []})  # no pooling runner: generate
    ctl.point = Point(name="p2", instances=[emb.model_copy(update={"engine": plain})])
    th.call(th.gateway.health.adopt())
    r = post(th, "/v1/chat/completions", model="emb", **chat)
    assert r.status_code == 200, r.text
    assert post(th, "/v1/embeddings", model="emb", input="x").status_code == 400
