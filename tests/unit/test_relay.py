"""The Ray node agent's relay without Ray: the routes it passes on, and to whom.

A small aiohttp app on 127.0.0.1 stands in for vLLM (the real engine behind the relay is in
tests/integration/test_ray_engine_access.py, which needs root for network namespaces); the
relay listens on 127.0.0.2, another loopback address, at the same port, as it listens on the
node's address on a Ray node.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import pytest
from waits import budget_s

from planner.adjuster.backends.relay import Relay, is_loopback
from planner.adjuster.gateway.config import GatewayConfig
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
            for method, path in (
                ("POST", "/v1/completions"),
                ("GET", "/health"),
                ("POST", "/collective_rpc"),
                ("POST", "/sleep?level=1"),
            ):
                r = httpx.request(method, base + path, headers=headers)
                assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert seen == []  # nothing reached the engine
        for method, path in (
            ("POST", "/collective_rpc"),
            ("POST", "/reset_prefix_cache"),
            ("GET", "/metrics"),
            ("GET", "/v1/../collective_rpc"),
        ):
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
        r = httpx.get(
            f"http://127.0.0.2:{port}/health", headers={"Authorization": f"Bearer {SECRET}"}
        )
        assert r.status_code == 502
    finally:
        relay.close(port)


def test_relay_runs_on_the_gateways_event_loop():
    """uvloop's, as the gateway's (h1server.loop_factory), when installed."""
    pytest.importorskip("uvloop")
    assert type(Relay("127.0.0.2").loop).__module__.startswith("uvloop")


def test_loopback_nodes_need_no_relay():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.77.0.1") and not is_loopback("node-a.lan")


def _closed(s: socket.socket, deadline: float) -> bool:
    """Whether the relay closed `s` before `deadline` (it reads b"", an answer then b"", or
    a reset)."""
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if not s.recv(65536):
                return True
        except TimeoutError:
            return False
        except OSError:
            return True
    return False


def test_relay_closes_slow_and_half_open_clients_within_the_header_timeout():
    """The gateway's defences on the relay (issue 43: 300 half-open connections and a
    slowloris were all still open after 90 s): with a 1 s header timeout every such client
    is closed, and one with the secret is still served meanwhile (502: no engine here)."""
    port = free_port()
    relay = Relay("127.0.0.2", GatewayConfig(header_timeout_s=1.0))
    relay.open(port, SECRET)
    socks: list[socket.socket] = []
    try:
        for k in range(30):
            s = socket.create_connection(("127.0.0.2", port), timeout=5)
            s.sendall(b"POST /v1/comp" if k % 2 else b"G")  # half a request line
            socks.append(s)
        slow = socket.create_connection(("127.0.0.2", port), timeout=5)
        socks.append(slow)
        for b in b"GET /health HTTP/1.1\r\nHost: h\r\nX-Pad: " + b"p" * 40:  # a byte / 0.1 s
            try:
                slow.sendall(bytes([b]))
            except OSError:  # closed by the relay
                break
            time.sleep(0.1)
        deadline = time.monotonic() + budget_s(5.0)  # the sweep runs every second
        assert all(_closed(s, deadline) for s in socks)
        key = {"Authorization": f"Bearer {SECRET}"}
        assert httpx.get(f"http://127.0.0.2:{port}/health", headers=key).status_code == 502
    finally:
        for s in socks:
            s.close()
        relay.close(port)


def test_relay_refuses_on_the_head_and_never_reads_the_body():
    """A keyless POST announcing 10 MiB: 401 at once and the connection closed after it,
    with the body unsent; past the connection cap new connections are closed."""
    port = free_port()
    relay = Relay("127.0.0.2", GatewayConfig(max_connections=16, header_timeout_s=30.0))
    relay.open(port, SECRET)
    try:
        s = socket.create_connection(("127.0.0.2", port), timeout=5)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 10485760\r\n\r\n")
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        assert got.startswith(b"HTTP/1.1 401 ") and b"Connection: close" in got
        s.close()
        idle = [socket.create_connection(("127.0.0.2", port), timeout=5) for _ in range(40)]
        try:
            time.sleep(0.3)
            assert relay.connections(port) <= 16
        finally:
            for c in idle:
                c.close()
    finally:
        relay.close(port)
