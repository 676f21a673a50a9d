"""Fake engines and a fake InstanceControl for gateway tests (no vLLM, fast), and the small
helpers those tests share: an instance, a request, the request log's rows.

The fake engine speaks the slice of the OpenAI API the gateway proxies (usage included, SSE
with an optional usage chunk); the fake control starts/stops one fake engine per instance and
records the order of its calls. The gateway fixtures over them are in conftest.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import threading
import time

import httpx
from waits import budget_s, wait_until

from planner.adjuster.backends.base import Handle
from planner.engines.process import free_port
from planner.errors import DrainedError
from planner.schemas.plan import Instance, MemoryGib, Point

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
        """Record the call, take the wake's time, and start a fresh engine in the old one's place;
        refused after `planner down` as the real control refuses (control._refuse_if_drained):
        a request racing the drain must not start what `down` stops."""
        if self.drain:
            raise DrainedError(self.drain, fix="`planner apply` lifts it")
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
    deadline = time.monotonic() + budget_s(10)
    while time.monotonic() < deadline:
        got = rows(tmp_path, table)
        if len(got) >= n:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{table}: fewer than {n} rows")


class EngineBackend:
    """A Backend whose 'processes' are fake engines on the instance's port (kill: `kill`)."""

    name = "engines"
    supports_sleep = False
    features: frozenset = frozenset()

    def has_process(self, handle: Handle) -> bool:
        return handle.pid is not None

    def __init__(self) -> None:
        self.engines: dict[int, FakeEngine] = {}
        self._pid = 5000

    def start(self, inst, *, model_path: str, served_name: str, log_path: str) -> Handle:
        self._pid += 1
        self.engines[self._pid] = FakeEngine(inst.id, inst.port).start()
        return Handle(inst.id, inst.node, "127.0.0.1", inst.port, pid=self._pid)

    def wait_ready(self, handle: Handle, timeout_s: float) -> None:
        pass

    def stop(self, handle: Handle, timeout_s: float = 30.0) -> None:
        eng = self.engines.pop(handle.pid or -1, None)
        if eng is not None:
            eng.stop()

    def is_alive(self, handle: Handle) -> bool:
        return handle.pid in self.engines

    def sleep(self, handle: Handle, level: int) -> None:
        self.stop(handle)

    def wake(self, handle: Handle, level: int) -> None:
        raise AssertionError("no sleep mode")

    def gpu_free_gib(self, node: str, gpus: list[int]) -> dict[int, float] | None:
        return None

    def kill(self, pid: int) -> None:
        """The server dies; the state still names its pid."""
        self.stop(Handle("x", "n", "127.0.0.1", 0, pid=pid))

    def close(self) -> None:
        for e in self.engines.values():
            e.stop()


def wait_in_flight(engine: FakeEngine, n: int = 1) -> None:
    """Until `engine` holds `n` requests in its handler (a request sent is not yet there)."""
    wait_until(lambda: engine.running >= n, f"{n} request(s) in flight at {engine.name}")


def leave_after_headers(url: str, body: dict, engine: FakeEngine, read_bytes: int = 0) -> None:
    """Send a request, optionally read some of the answer, and close the connection."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    with socket.create_connection((host, int(port))) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        got = b""
        while len(got) < read_bytes:
            got += s.recv(4096)
        wait_in_flight(engine)  # the request is in flight at the engine
