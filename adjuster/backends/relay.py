"""A Ray node's one door to its engines from other hosts (docs/security.md).

On a Ray node the engines bind the node's loopback: vLLM's API key guards only `/v1/*`, and
`/health`, `/metrics` and the dev-mode routes (`/sleep`, `/wake_up`, `/collective_rpc`,
`/reset_*`) would answer anyone who reaches the port. The node agent runs this relay: for
each engine it listens on the node's address at the engine's port (the engine holds the same
port on 127.0.0.1, a different address) and passes on only the routes the planner uses,
and only with that engine's secret (`Authorization: Bearer`, checked on every route). The
gateway and the agent's callers reach `node address:port` exactly as they would the engine.

It runs on the gateway's own server (h1server.py), with the gateway's defences and their
defaults (GatewayConfig): the header timeout, the keep-alive timeout, the connection cap,
the body cap and body budget; the secret and the route are checked on the head, so a
refused request's body is never read (answer, then close). The engine's answer is streamed
back through aiohttp's client. It all runs on its own event loop in a daemon thread of the
(threaded) agent actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the server is imported where it starts: the `http` extra's httptools
    from planner.adjuster.gateway.config import GatewayConfig
    from planner.adjuster.gateway.h1server import Request, Server
    from planner.adjuster.gateway.reply import Response, StreamResponse

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


def _error(status: int, message: str) -> Response:
    from planner.adjuster.gateway.reply import json_response

    kind = "authentication_error" if status == 401 else "invalid_request_error"
    return json_response({"error": {"message": message, "type": kind}}, status=status)


class _Gate:
    """The relay's check on a request's head (h1server.Gate): the engine's secret, then the
    route, then the body cap."""

    def __init__(self, relay: Relay, port: int):
        self.relay, self.port = relay, port

    def admit(self, request: Request) -> Response | None:
        if not self.relay._authorized(self.port, request.headers.get("authorization", "")):
            return _error(401, "this engine answers only the planner (missing or wrong key)")
        if (request.method, request.path) not in ROUTES:
            return _error(404, f"{request.method} {request.path} is not relayed to engines")
        cap = self.relay.cfg.max_body_bytes
        if (request.body.length or 0) > cap:
            return _error(413, f"the body exceeds {cap // 2**20} MiB")
        return None

    def release(self, request: Request) -> None:
        return None


class Relay:
    """Per-engine listeners on `bind_host` that forward allowed routes to 127.0.0.1
    (`config`: the gateway's knobs whose client defences it shares)."""

    def __init__(self, bind_host: str, config: GatewayConfig | None = None):
        from planner.adjuster.gateway.config import GatewayConfig

        self.bind_host = bind_host
        self.cfg = config or GatewayConfig()
        self._secrets: dict[int, str] = {}
        self._listeners: dict[int, tuple[asyncio.Server, Server, asyncio.Task]] = {}
        self._session: Any = None
        from planner.adjuster.gateway.h1server import loop_factory

        self.loop = (loop_factory() or asyncio.new_event_loop)()  # the gateway's loop
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
        return sorted(self._listeners)

    def connections(self, port: int) -> int:
        """Client connections open on `port` now."""
        entry = self._listeners.get(port)
        return len(entry[1].guard.open) if entry is not None else 0

    async def _open(self, port: int, secret: str) -> None:
        import aiohttp

        from planner.adjuster.gateway import guard
        from planner.adjuster.gateway.clock import SYSTEM
        from planner.adjuster.gateway.h1body import Budget
        from planner.adjuster.gateway.h1server import Server

        self._secrets[port] = secret
        if port in self._listeners:
            return
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
            self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        cfg = self.cfg
        cap = guard.connection_cap(cfg.max_connections, guard.raise_open_file_limit())
        conns = guard.Guard(
            cap,
            cfg.header_timeout_s,
            cfg.warn_every_s,
            SYSTEM.mono_s,
            keepalive_timeout_s=cfg.keepalive_timeout_s,
        )

        async def handle(request: Request) -> Response | StreamResponse:
            return await self._handle(port, request)

        server = Server(
            handle,
            conns,
            guard.http_logger(cfg.warn_every_s),
            gate=_Gate(self, port),
            budget=Budget(cfg.body_budget_bytes, cfg.body_budget_bytes),  # one caller: the planner
        )
        listener = await self.loop.create_server(server, self.bind_host, port)
        self._listeners[port] = (listener, server, self.loop.create_task(conns.loop()))

    async def _close(self, port: int) -> None:
        entry = self._listeners.pop(port, None)
        self._secrets.pop(port, None)
        if entry is not None:
            listener, server, sweep = entry
            listener.close()
            sweep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweep
            await server.shutdown(5.0)
        if not self._listeners and self._session is not None:
            await self._session.close()  # the last engine went: nothing left to pass on
            self._session = None

    def _authorized(self, port: int, header: str) -> bool:
        secret = self._secrets.get(port, "")
        return bool(secret) and hmac.compare_digest(header.encode(), f"Bearer {secret}".encode())

    async def _handle(self, port: int, request: Request) -> Response | StreamResponse:
        import aiohttp

        from planner.adjuster.gateway.body import BadBody, read_body
        from planner.adjuster.gateway.clock import SYSTEM
        from planner.adjuster.gateway.reply import StreamResponse

        cfg = self.cfg
        try:
            body = await read_body(request, cfg.max_body_bytes, cfg.body_timeout_s, SYSTEM.mono_s)
        except BadBody as e:
            return _error(e.status, e.message)
        headers = {
            h: v for h in _PASSED_HEADERS if (v := request.headers.get(h.lower())) is not None
        }
        url = f"http://{LOOPBACK}:{port}{request.path}"
        query = request.target.partition("?")[2].partition("#")[0]
        if query:
            url += "?" + query
        resp = None
        try:
            async with self._session.request(request.method, url, data=body, headers=headers) as up:
                passed = {
                    h: up.headers[h]
                    for h in ("Content-Type", "Content-Encoding")
                    if h in up.headers
                }
                resp = StreamResponse(up.status, passed)
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                return resp
        except aiohttp.ClientError as e:
            if resp is not None and resp.prepared:
                return resp  # the engine went away mid-answer: the client sees it end
            return _error(502, f"the engine on port {port} did not answer: {type(e).__name__}")
