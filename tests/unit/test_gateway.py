"""Gateway behaviour against fake engines and a fake InstanceControl (no vLLM, fast).

The fake engine speaks the slice of the OpenAI API the gateway proxies (usage included, SSE
with an optional usage chunk); the fake control starts/stops one fake engine per instance and
records the order of its calls.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.adjuster.backends.base import Handle
from planner.adjuster.gateway import (
    Gateway,
    GatewayConfig,
    GatewayThread,
    SseUsage,
    identity,
    overlaps,
)
from planner.engines.process import free_port
from planner.schemas.plan import Instance, MemoryGib, Point
from planner.trace.frame import read_trace

DIED: set[str] = set()  # `die_once` keys whose engine died already (one death per key)


class FakeEngine:
    """A tiny OpenAI-like server in a thread: usage in every answer, SSE streams."""

    def __init__(self, name: str, port: int):
        self.name, self.port = name, port
        self.running = 0  # requests in the handler now
        self.peak = 0  # the most at once
        self.aborted = 0  # handlers cancelled because the caller closed the connection
        self.dead = False  # its engine died: /health answers 503
        self.text = "abc"  # what it answers (non-streamed)
        self.bodies: list[dict] = []  # what /v1/embeddings and /v1/responses received
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    # a fake engine: one nested handler per route it answers
    def _app(self):  # noqa: C901, PLR0915
        from aiohttp import web

        usage = {
            "prompt_tokens": 7,
            "completion_tokens": 3,
            "total_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": 2},
        }

        async def completions(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            self.running += 1
            self.peak = max(self.peak, self.running)
            try:
                return await answer(request, body)
            except (asyncio.CancelledError, ConnectionResetError):
                self.aborted += 1  # as vLLM aborts a request whose caller left
                raise
            finally:
                self.running -= 1

        async def answer(request: web.Request, body: dict) -> web.StreamResponse:
            await asyncio.sleep(float(body.get("delay_s", 0)))
            if body.get("error_500"):  # an error of a live engine
                return web.json_response({"error": {"message": "boom"}}, status=500)
            key = body.get("die_once")
            if key is not None and key not in DIED:  # as vLLM when its EngineCore dies:
                DIED.add(key)  # a 500 for what it held, and /health 503 from then on
                self.dead = True
                return web.json_response({"error": {"message": "EngineCore died"}}, status=500)
            if body.get("bad"):
                return web.json_response({"error": {"message": "bad request"}}, status=400)
            if not body.get("stream"):
                return web.json_response(
                    {
                        "id": "x",
                        "served_by": self.name,
                        "choices": [{"text": self.text}],
                        "usage": usage,
                    }
                )
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for tok in "abc" * int(body.get("repeat", 1)):
                await asyncio.sleep(float(body.get("token_delay_s", 0)))
                ev = json.dumps({"served_by": self.name, "choices": [{"text": tok}]})
                await resp.write(f"data: {ev}\n\n".encode())
            if (body.get("stream_options") or {}).get("include_usage"):
                ev = json.dumps({"choices": [], "usage": usage})
                await resp.write(f"data: {ev}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp

        async def embeddings(request: web.Request) -> web.Response:
            body = await request.json()
            self.bodies.append(body)
            return web.json_response(
                {
                    "object": "list",
                    "model": body["model"],
                    "served_by": self.name,
                    "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.5]}],
                    "usage": {"prompt_tokens": 5, "total_tokens": 5},
                }
            )

        async def responses(request: web.Request) -> web.StreamResponse:
            # as vLLM's Responses API: usage named input/output, in the response object;
            # a stream of named events ending with `response.completed` (no [DONE])
            body = await request.json()
            self.bodies.append(body)
            resp = {
                "id": "resp_1",
                "object": "response",
                "model": body["model"],
                "served_by": self.name,
                "status": "completed",
                "output": [{"type": "message", "content": [{"type": "output_text", "text": "ab"}]}],
                "usage": {
                    "input_tokens": 6,
                    "output_tokens": 4,
                    "total_tokens": 10,
                    "input_tokens_details": {"cached_tokens": 1},
                },
            }
            if not body.get("stream"):
                return web.json_response(resp)
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            created = {**resp, "status": "in_progress", "usage": None}
            for kind, ev in (
                ("response.created", {"type": "response.created", "response": created}),
                (
                    "response.output_text.delta",
                    {"type": "response.output_text.delta", "delta": "ab"},
                ),
                ("response.completed", {"type": "response.completed", "response": resp}),
            ):
                await out.write(f"event: {kind}\ndata: {json.dumps(ev)}\n\n".encode())
            await out.write_eof()
            return out

        async def messages(request: web.Request) -> web.StreamResponse:
            # as vLLM's Anthropic Messages API: usage input/output; a stream of named events,
            # input tokens in message_start's message, output tokens in message_delta
            body = await request.json()
            self.bodies.append(body)
            if request.path.endswith("/count_tokens"):
                return web.json_response({"input_tokens": 6})
            msg = {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": "ab"}],
                "stop_reason": "max_tokens",
                "usage": {"input_tokens": 6, "output_tokens": 4},
            }
            if not body.get("stream"):
                return web.json_response(msg)
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            start = {**msg, "content": [], "usage": {"input_tokens": 6, "output_tokens": 0}}
            for kind, ev in (
                ("message_start", {"type": "message_start", "message": start}),
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": "ab"},
                    },
                ),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "usage": {"output_tokens": 4},
                        "delta": {"stop_reason": "max_tokens"},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ):
                await out.write(f"event: {kind}\ndata: {json.dumps(ev)}\n\n".encode())
            await out.write_eof()
            return out

        async def health(request: web.Request) -> web.Response:
            return web.Response(text="", status=503 if self.dead else 200)

        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        app.router.add_post("/v1/chat/completions", completions)
        app.router.add_post("/v1/embeddings", embeddings)
        app.router.add_post("/v1/responses", responses)
        app.router.add_post("/v1/messages", messages)
        app.router.add_post("/v1/messages/count_tokens", messages)
        app.router.add_get("/health", health)
        return app

    def _run(self) -> None:
        from aiohttp import web

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            runner = web.AppRunner(self._app(), handler_cancellation=True)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            self._ready.set()
            await self._stop.wait()
            await runner.cleanup()

        asyncio.run(main())

    def start(self) -> FakeEngine:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


class FakeControl:
    """InstanceControl over fake engines; `wake_delay_s` stands in for a slow start and
    `sleep_delay_s` for a slow stop (the engine refuses connections while it lasts)."""

    def __init__(
        self, point: Point, awake: set[str], wake_delay_s: float = 0.0, sleep_delay_s: float = 0.0
    ):
        self.point = point
        self.specs = {i.id: i for i in point.instances}
        self.engines: dict[str, FakeEngine] = {}
        self.calls: list[tuple[str, str]] = []
        self.wake_delay_s, self.sleep_delay_s = wake_delay_s, sleep_delay_s
        self.drain = ""  # what `planner down` would leave in the state's meta
        self._lock = threading.Lock()
        for iid in awake:
            self._start(iid)

    def _start(self, iid: str) -> Handle:
        spec = self.specs[iid]
        self.engines[iid] = FakeEngine(iid, spec.port).start()
        return self._handle(iid)

    def _handle(self, iid: str) -> Handle:
        spec = self.specs[iid]
        return Handle(instance_id=iid, node=spec.node, host="127.0.0.1", port=spec.port)

    def status(self):
        def one(iid: str):
            if iid not in self.engines:
                return ("stopped", None)
            return ("failed", None) if self.engines[iid].dead else ("awake", self._handle(iid))

        return {iid: one(iid) for iid in self.specs}

    def wake(self, instance_id: str, timeout_s: float) -> Handle:
        return self._replace("wake", instance_id)

    def restart(self, instance_id: str, timeout_s: float) -> Handle:
        return self._replace("restart", instance_id)

    def _replace(self, call: str, instance_id: str) -> Handle:
        """Record the call, take the wake's time, and start a fresh engine in the old one's place."""
        with self._lock:
            self.calls.append((call, instance_id))
        time.sleep(self.wake_delay_s)
        old = self.engines.pop(instance_id, None)
        if old is not None:
            old.stop()
        return self._start(instance_id)

    def follow(self) -> Point:
        return self.point

    def drained(self) -> str:
        return self.drain

    def sleep(self, instance_id: str) -> None:
        with self._lock:
            self.calls.append(("sleep", instance_id))
        eng = self.engines.get(instance_id)
        if eng is not None:
            eng.stop()
        time.sleep(self.sleep_delay_s)
        self.engines.pop(instance_id, None)

    def kill(self, instance_id: str) -> None:
        """The process dies behind the controller's back."""
        self.engines.pop(instance_id).stop()

    def close(self) -> None:
        for e in list(self.engines.values()):
            e.stop()


def inst(iid: str, model: str, gpus: list[int], tier: str = "host", node: str = "n1") -> Instance:
    return Instance(
        id=iid,
        model=model,
        variant="bf16",
        node=node,
        gpus=gpus,
        tp=len(gpus) or 1,
        tier=tier,
        memory_gib=MemoryGib(weights=1, kv=1, overhead=0.5),
        port=free_port(),
    )


@pytest.fixture
def setup(tmp_path):
    """Start a gateway over fake engines: yields a factory (instances, awake ids, config)."""
    made = []

    def make(instances, awake, *, wake_delay_s=0.0, sleep_delay_s=0.0, **cfg):
        point = Point(name="p", instances=instances)
        ctl = FakeControl(point, set(awake), wake_delay_s, sleep_delay_s)
        conf = GatewayConfig(log_flush_s=0.05, **cfg)
        gw = Gateway(point, ctl, state_dir=tmp_path, config=conf)
        th = GatewayThread(gw, port=free_port()).start()
        made.append((th, ctl))
        return th, ctl

    yield make
    for th, ctl in made:
        th.stop()
        ctl.close()


def post(th, path="/v1/completions", **body):
    headers = body.pop("headers", {})
    return httpx.post(th.url + path, json=body, headers=headers, timeout=30)


def rows(tmp_path, table="requests"):
    con = sqlite3.connect(tmp_path / "requests.sqlite")
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(f"SELECT * FROM {table}")]
    finally:
        con.close()


def wait_rows(tmp_path, n, table="requests"):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = rows(tmp_path, table)
        if len(got) >= n:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{table}: fewer than {n} rows")


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
        time.sleep(0.2)  # the slow request is in flight on a0
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
    assert identity({"X-User": "u", "X-Session": "s"}, b"k" * 32) == ("u", "s")
    user, session = identity({"Authorization": "Bearer sk-secret"}, b"k" * 32)
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
    from planner.cli.example import CPU_FILES
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
