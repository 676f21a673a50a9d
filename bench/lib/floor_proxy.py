"""The floor of a proxy's CPU: the least a Python proxy does per request (issue 43).

`python bench/lib/floor_proxy.py PORT UPSTREAM_PORT [--parts STATE_DIR KEYS]` listens on
127.0.0.1:PORT and passes every POST on to 127.0.0.1:UPSTREAM_PORT: one upstream
connection per client connection, the engine's API key header (env
`FLOOR_UPSTREAM_HEADERS`, "Name: value" lines, so that it is not on argv) added, the body
forwarded as it came, the answer's usage parsed and a row of it kept in memory, the answer
passed back with its status and body. Heads and bodies are parsed by httptools both ways,
on uvloop, all in the protocols' callbacks: no task or coroutine per request.

What it leaves out is everything the gateway adds: keys and their limits, routing among
instances, waking, stand-ins, retries, timeouts, the request log on disk, metrics, chunked
bodies, streams, the body budget, connection caps. So its CPU per request, measured on the
same engine and machine by `bench/gateway_overhead.py --floor`, is what any Python proxy
pays there for waking twice per request and parsing; the gateway's figure beside it says
what the gateway's own work costs. A measuring instrument only: it answers loopback alone
and is never started by the product.

`--parts STATE_DIR KEYS`: each request also runs the gateway's own parts that its common
path runs (exchange.py), on a real `Gateway` over the upstream (lib/stub_gateway.py, its
loops running: request-log flushes to SQLite, key-file checks, health probes): the head's
key check and the key's limits, the body budget, the body's parse and checks, the route
and the instance's slot, the hand-off, the request record, the deadline table, the answer's
head with the model that served it. Only the connection handling stays the floor's, so
the gateway's figure beside this one says what its server and client cost beyond their
parsing, and this one beside the floor what its features cost (`bench/gateway_cpu.py
--compare`). Requests outside the common case (a refused key, a stream) close the
connection.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import httptools
import uvloop

ROWS_KEPT = 1000  # the in-memory log's bound (a row per request, as a gateway keeps one)


class Upstream(asyncio.Protocol):
    """The connection to the engine of one client connection."""

    def __init__(self, client: Client):
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.parts: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.parts = []

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        self.client.answer(self.parser.get_status_code(), b"".join(self.parts))

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class Client(asyncio.Protocol):
    """One client connection: each request forwarded once its body is in."""

    def __init__(self, upstream_port: int, extra_head: bytes, rows: list[tuple]):
        self.upstream_port = upstream_port
        self.extra_head = extra_head
        self.rows = rows
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.up: Upstream | None = None
        self.connecting: asyncio.Future[None] | None = None
        self.parts: list[bytes] = []
        self.path = b"/"
        self.model = ""
        self.t0_s = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.close()

    def on_message_begin(self) -> None:
        self.parts = []

    def on_url(self, url: bytes) -> None:
        self.path = url

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        self.t0_s = time.monotonic()
        body = b"".join(self.parts)
        self.model = json.loads(body).get("model", "")  # what a router reads
        msg = (
            b"POST %s HTTP/1.1\r\nHost: engine\r\nContent-Type: application/json\r\n"
            b"%sContent-Length: %d\r\n\r\n%s" % (self.path, self.extra_head, len(body), body)
        )
        self.forward(msg)

    def forward(self, msg: bytes) -> None:
        """Send a request to the engine (the first opens the connection)."""
        if self.up is None:
            self.connecting = asyncio.ensure_future(self._connect(msg))
        elif self.up.transport is not None:
            self.up.transport.write(msg)

    async def _connect(self, msg: bytes) -> None:
        loop = asyncio.get_running_loop()
        _, self.up = await loop.create_connection(
            lambda: Upstream(self), "127.0.0.1", self.upstream_port
        )
        assert self.up.transport is not None
        self.up.transport.write(msg)

    def answer(self, status: int, body: bytes) -> None:
        usage = (json.loads(body).get("usage") or {}) if status == 200 else {}
        self.rows.append(
            (
                self.t0_s,
                self.model,
                usage.get("prompt_tokens", 0),
                usage.get("completion_tokens", 0),
                time.monotonic() - self.t0_s,
                status,
            )
        )
        if len(self.rows) > ROWS_KEPT:
            del self.rows[: ROWS_KEPT // 2]
        if self.transport is not None:
            self.transport.write(
                b"HTTP/1.1 %d \r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (status, len(body), body)
            )

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self.up is not None and self.up.transport is not None:
            self.up.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()


class PartsRequest:
    """What the gateway's parts read and keep of a request (h1server.Request's fields)."""

    __slots__ = ("admitted", "caller", "conn", "headers", "held", "inst", "owner", "path", "r")

    def __init__(self, conn: PartsClient, path: str, headers: dict[str, str]):
        self.conn = conn
        self.path = path
        self.headers = headers  # by lower-case name, the first of repeated ones
        self.caller: Any = None
        self.admitted: str | None = None
        self.owner = ""
        self.held = 0
        self.inst: Any = None
        self.r: Any = None


class PartsClient(Client):
    """A client connection whose requests also run the gateway's parts (`--parts`)."""

    def __init__(self, upstream_port: int, extra_head: bytes, rows: list[tuple], gw: Any):
        super().__init__(upstream_port, extra_head, rows)
        self.gw = gw
        self.fields: list[tuple[bytes, bytes]] = []
        self.req: PartsRequest | None = None
        self.peer = "127.0.0.1"  # what the key check reads of a connection...
        self.auth_memo: Any = None  # ...and keeps on it

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))

    def on_headers_complete(self) -> None:
        """The gateway's gate on the head: the key, its limits, the body budget."""
        fields, self.fields = self.fields, []
        headers = {n.decode("latin-1").lower(): v.decode("latin-1") for n, v in reversed(fields)}
        req = self.req = PartsRequest(self, self.path.decode("latin-1"), headers)
        length = int(headers.get("content-length", 0))
        gw = self.gw
        if gw.auth.gate(req, True) is not None or not gw.budget.take(req.owner, length):
            raise RuntimeError("refused on its head")  # (the connection closes)
        req.held = length

    def on_message_complete(self) -> None:
        """The gateway's `Proxy.fast` and `Exchange.send`: the common case's checks, the
        route, the slot, the record, the deadline, the request to the instance."""
        from planner.adjuster.gateway.body import cut, parse
        from planner.adjuster.gateway.http1 import message, render_head

        gw, req = self.gw, self.req
        assert req is not None
        body = b"".join(self.parts)
        payload = parse(body)
        model = payload["model"]
        proxy, pool = gw.proxy, gw.pool
        inst = proxy.choose(model) if model in pool.by_model else None
        if (
            payload.get("stream")
            or inst is None
            or not gw.auth.allows(req, model)
            or proxy.wrong_task(model, req.path) is not None
            or inst.outstanding >= inst.limit
            or pool.queued_for_admission(model)
        ):
            raise RuntimeError("not the common case")
        user, session = gw.auth.identity(req)
        req.r = gw.recorder.start(cut(user), cut(session), req)
        req.r.model = cut(model)
        gw.tiers.hand_off(model)
        pool.take(inst)
        req.inst = inst
        now_s = inst.last_used_s = gw.clock.mono_s()
        proxy.forwarder.exchanges[req] = now_s + gw.cfg.request_timeout_s
        self.forward(message(render_head(*inst.addr, req.path, inst.auth_items), body))

    def answer(self, status: int, body: bytes) -> None:
        """The gateway's `Exchange.answered`: the slot back, the record, the answer, the
        key's slot and body budget back."""
        from planner.adjuster.gateway.reply import render_head
        from planner.adjuster.gateway.stream import SERVED_BY

        gw, req = self.gw, self.req
        assert req is not None
        inst, rec = req.inst, gw.recorder
        gw.proxy.forwarder.exchanges.pop(req, None)
        gw.pool.release(inst)
        rec.done(req.r, inst, status, rec.since_s(req.r), body)
        headers = {"Content-Type": "application/json", SERVED_BY: inst.spec.model}
        head = render_head(status, headers, f"Content-Length: {len(body)}\r\n")
        if self.transport is not None:
            self.transport.write(head + body)
        gw.budget.give(req.owner, req.held)
        gw.auth.release(req)
        self.req = None


def extra_head() -> bytes:
    """The header lines every upstream request carries (the engine's API key), from the env."""
    lines = [ln.strip() for ln in os.environ.get("FLOOR_UPSTREAM_HEADERS", "").splitlines()]
    return b"".join(ln.encode("latin-1") + b"\r\n" for ln in lines if ln)


async def serve(port: int, upstream_port: int, parts: list[str]) -> None:
    rows: list[tuple] = []
    head = extra_head()
    loop = asyncio.get_running_loop()
    if parts:  # --parts STATE_DIR KEYS
        from stub_gateway import stub_gateway

        gw = stub_gateway(Path(parts[0]), Path(parts[1]), upstream_port)
        await gw.start()
        server = await loop.create_server(
            lambda: PartsClient(upstream_port, head, rows, gw), "127.0.0.1", port
        )
    else:
        server = await loop.create_server(
            lambda: Client(upstream_port, head, rows), "127.0.0.1", port
        )
    await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("port", type=int)
    ap.add_argument("upstream_port", type=int)
    ap.add_argument("--parts", nargs=2, default=[], metavar=("STATE_DIR", "KEYS"))
    a = ap.parse_args()
    uvloop.run(serve(a.port, a.upstream_port, a.parts))
