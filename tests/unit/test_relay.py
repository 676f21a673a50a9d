"""The Ray node agent's relay without Ray: the routes it passes on, and to whom.

A small aiohttp app on 127.0.0.1 stands in for vLLM (the real engine behind the relay is in
tests/integration/test_ray_engine_access.py, which needs root for network namespaces); the
relay listens on 127.0.0.2, another loopback address, at the same port, as it listens on the
node's address on a Ray node.
"""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from planner.adjuster.backends.relay import Relay, is_loopback
from planner.engines.process import free_port

SECRET = "s3cret-value"


@pytest.fixture
def upstream():
    """A stand-in engine on 127.0.0.1:PORT answering every path with what it received."""
    from aiohttp import web

    port = free_port()
    loop = asyncio.new_event_loop()
    seen: list[tuple[str, str, str]] = []

    async def echo(request):
        seen.append((request.method, request.path_qs, request.headers.get("Authorization", "")))
        if request.path == "/v1/completions":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(3):
                await resp.write(f"data: {i}\n\n".encode())
            await resp.write_eof()
            return resp
        return web.json_response({"path": request.path_qs})

    async def start():
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", echo)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner

    threading.Thread(target=loop.run_forever, daemon=True).start()
    runner = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    yield port, seen
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)


def test_relay_passes_only_the_planners_routes_with_the_secret(upstream):
    port, seen = upstream
    relay = Relay("127.0.0.2")
    relay.open(port, SECRET)
    base = f"http://127.0.0.2:{port}"
    key = {"Authorization": f"Bearer {SECRET}"}
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": SECRET}):
            for method, path in (("POST", "/v1/completions"), ("GET", "/health"),
                                 ("POST", "/collective_rpc"), ("POST", "/sleep?level=1")):  # fmt: skip
                r = httpx.request(method, base + path, headers=headers)
                assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert seen == []  # nothing reached the engine
        for method, path in (("POST", "/collective_rpc"), ("POST", "/reset_prefix_cache"),
                             ("GET", "/metrics"), ("GET", "/v1/../collective_rpc")):  # fmt: skip
            assert httpx.request(method, base + path, headers=key).status_code == 404, path
        assert httpx.get(base + "/v1/completions", headers=key).status_code == 404  # GET: no
        assert seen == []
        r = httpx.post(base + "/v1/completions", headers=key, json={"prompt": "x"})
        assert r.status_code == 200 and r.text == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
        assert httpx.post(base + "/sleep?level=2", headers=key).json() == {"path": "/sleep?level=2"}
        assert seen[0] == ("POST", "/v1/completions", f"Bearer {SECRET}")  # the engine checks too
        relay.open(port, "rotated")  # a restarted engine's new secret replaces the old one
        assert httpx.get(base + "/health", headers=key).status_code == 401
        relay.close(port)
        with pytest.raises(httpx.ConnectError):
            httpx.get(base + "/health", headers=key)
    finally:
        relay.close(port)


def test_relay_answers_502_when_the_engine_is_down():
    port = free_port()
    relay = Relay("127.0.0.2")
    relay.open(port, SECRET)
    try:
        r = httpx.get(f"http://127.0.0.2:{port}/health", headers={"Authorization": f"Bearer {SECRET}"})  # fmt: skip
        assert r.status_code == 502
    finally:
        relay.close(port)


def test_loopback_nodes_need_no_relay():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.77.0.1") and not is_loopback("node-a.lan")
