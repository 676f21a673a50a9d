"""A Ray node's one door to its engines from other hosts (docs/security.md).

On a Ray node the engines bind the node's loopback: vLLM's API key guards only `/v1/*`, and
`/health`, `/metrics` and the dev-mode routes (`/sleep`, `/wake_up`, `/collective_rpc`,
`/reset_*`) would answer anyone who reaches the port. The node agent runs this relay: for
each engine it listens on the node's address at the engine's port (the engine holds the same
port on 127.0.0.1, a different address) and passes on only the routes the planner uses,
and only with that engine's secret (`Authorization: Bearer`, checked on every route). The
gateway and the agent's callers reach `node address:port` exactly as they would the engine.

aiohttp runs on its own event loop in a daemon thread of the (threaded) agent actor.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import threading
from typing import Any

from planner.engines.base import api_routes, get_engine
from planner.engines.kinds import engine_kinds

# (method, path) the planner sends an engine: the engines' route tables (planner/engines/):
# the gateway's API routes, readiness, health, sleep and the wake steps (a level-2 wake
# reloads the weights), and the model list
ROUTES = frozenset(
    {("POST", path) for path in api_routes()}
    | {r for kind in engine_kinds() for r in get_engine(kind).control_routes()}
)
_PASSED_HEADERS = ("Content-Type", "Accept", "Authorization")
LOOPBACK = "127.0.0.1"


def is_loopback(address: str) -> bool:
    """Whether `address` is a loopback address (a node only this machine reaches: no relay)."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _error(status: int, message: str) -> Any:
    from aiohttp import web

    kind = "authentication_error" if status == 401 else "invalid_request_error"
    return web.json_response({"error": {"message": message, "type": kind}}, status=status)


class Relay:
    """Per-engine listeners on `bind_host` that forward allowed routes to 127.0.0.1."""

    def __init__(self, bind_host: str):
        self.bind_host = bind_host
        self._secrets: dict[int, str] = {}
        self._runners: dict[int, Any] = {}
        self._session: Any = None
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="planner-relay", daemon=True).start()

    def _call(self, coro: Any, timeout_s: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def open(self, port: int, secret: str) -> None:
        """Listen for the engine on `port` (idempotent; the secret is updated)."""
        self._call(self._open(port, secret))

    def close(self, port: int) -> None:
        """Stop listening for the engine on `port` (no error if not open)."""
        self._call(self._close(port))

    def ports(self) -> list[int]:
        return sorted(self._runners)

    async def _open(self, port: int, secret: str) -> None:
        import aiohttp
        from aiohttp import web

        self._secrets[port] = secret
        if port in self._runners:
            return
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
            self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        app = web.Application(client_max_size=64 * 2**20)

        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._handle(port, request)

        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.bind_host, port).start()
        except OSError:
            await runner.cleanup()
            raise
        self._runners[port] = runner

    async def _close(self, port: int) -> None:
        runner = self._runners.pop(port, None)
        self._secrets.pop(port, None)
        if runner is not None:
            await runner.cleanup()
        if not self._runners and self._session is not None:
            await self._session.close()  # the last engine went: nothing left to pass on
            self._session = None

    def _authorized(self, port: int, header: str) -> bool:
        secret = self._secrets.get(port, "")
        return bool(secret) and hmac.compare_digest(header.encode(), f"Bearer {secret}".encode())

    async def _handle(self, port: int, request: Any) -> Any:
        import aiohttp
        from aiohttp import web

        if not self._authorized(port, request.headers.get("Authorization", "")):
            return _error(401, "this engine answers only the planner (missing or wrong key)")
        if (request.method, request.path) not in ROUTES:
            return _error(404, f"{request.method} {request.path} is not relayed to engines")
        body = await request.read()
        headers = {h: request.headers[h] for h in _PASSED_HEADERS if h in request.headers}
        url = f"http://{LOOPBACK}:{port}{request.path_qs}"
        resp = None
        try:
            async with self._session.request(request.method, url, data=body, headers=headers) as up:
                resp = web.StreamResponse(status=up.status)
                for h in ("Content-Type", "Content-Encoding"):
                    if h in up.headers:
                        resp.headers[h] = up.headers[h]
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
        except aiohttp.ClientError as e:
            if resp is not None and resp.prepared:
                return resp  # the engine went away mid-answer: the client sees it end
            return _error(502, f"the engine on port {port} did not answer: {type(e).__name__}")
