"""Stub OpenAI engines and an InstanceControl over them, for gateway benches whose subject is
the gateway itself (its clients, its log, its wakes), not the engine: each engine answers at
once with usage; a wake takes `wake_s`. Loopback only.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from planner.adjuster.backends.base import Handle
from planner.schemas.plan import Point

_USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


class StubEngine:
    """One engine on its port, on its own event loop in a thread."""

    def __init__(self, port: int):
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._up = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        if not self._up.wait(10):
            raise RuntimeError(f"stub engine on {port} did not start")

    def _run(self) -> None:
        from aiohttp import web

        async def complete(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            if not body.get("stream"):
                return web.json_response({"id": "x", "choices": [{"text": "ok"}], "usage": _USAGE})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b'data: {"choices": [{"text": "ok"}]}\n\n')
            usage = json.dumps({"choices": [], "usage": _USAGE})
            await resp.write(f"data: {usage}\n\ndata: [DONE]\n\n".encode())
            return resp

        async def health(request: web.Request) -> web.Response:
            return web.Response(text="")

        async def main() -> None:
            app = web.Application()
            app.router.add_post("/v1/completions", complete)
            app.router.add_post("/v1/chat/completions", complete)
            app.router.add_get("/health", health)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            self._up.set()
            await self._stop.wait()
            await runner.cleanup()

        asyncio.run(main())

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)


class StubControl:
    """InstanceControl: `wake` starts an instance's stub engine after `wake_s`; `sleep`
    stops it. gpu-tier instances start awake."""

    def __init__(self, point: Point, wake_s: float):
        self.point = point
        self.specs = {i.id: i for i in point.instances}
        self.wake_s = wake_s
        self.engines = {i.id: StubEngine(i.port) for i in point.instances if i.tier == "gpu"}

    def _handle(self, iid: str) -> Handle:
        s = self.specs[iid]
        return Handle(instance_id=iid, node=s.node, host="127.0.0.1", port=s.port)

    def status(self):
        return {
            iid: ("awake", self._handle(iid)) if iid in self.engines else ("stopped", None)
            for iid in self.specs
        }

    def wake(self, instance_id: str, timeout_s: float) -> Handle:
        time.sleep(self.wake_s)
        if instance_id not in self.engines:
            self.engines[instance_id] = StubEngine(self.specs[instance_id].port)
        return self._handle(instance_id)

    restart = wake

    def sleep(self, instance_id: str) -> None:
        eng = self.engines.pop(instance_id, None)
        if eng is not None:
            eng.stop()

    def follow(self) -> Point:
        return self.point

    def drained(self) -> str:
        return ""  # the bench never runs `planner down`

    def close(self) -> None:
        for e in self.engines.values():
            e.stop()
