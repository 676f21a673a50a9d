"""The floor of a proxy's CPU: the least a Python proxy does per request (issue 43).

`python bench/lib/floor_proxy.py PORT UPSTREAM_PORT` listens on 127.0.0.1:PORT and passes
every POST on to 127.0.0.1:UPSTREAM_PORT: one upstream connection per client connection,
the engine's API key header (env `FLOOR_UPSTREAM_HEADERS`, "Name: value" lines, so that it
is not on argv) added, the body forwarded as it came, the answer's usage parsed and a row of
it kept in memory, the answer passed back with its status and body. Heads and bodies are
parsed by httptools both ways, on uvloop, all in the protocols' callbacks: no task or
coroutine per request.

What it leaves out is everything the gateway adds: keys and their limits, routing among
instances, waking, stand-ins, retries, timeouts, the request log on disk, metrics, chunked
bodies, streams, the body budget, connection caps. So its CPU per request, measured on the
same engine and machine by `bench/gateway_overhead.py --floor`, is what any Python proxy
pays there for waking twice per request and parsing; the gateway's figure beside it says
what the gateway's own work costs. A measuring instrument only: it answers loopback alone
and is never started by the product.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

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
        if self.up is None:  # the first request opens the engine connection
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


def extra_head() -> bytes:
    """The header lines every upstream request carries (the engine's API key), from the env."""
    lines = [ln.strip() for ln in os.environ.get("FLOOR_UPSTREAM_HEADERS", "").splitlines()]
    return b"".join(ln.encode("latin-1") + b"\r\n" for ln in lines if ln)


async def serve(port: int, upstream_port: int) -> None:
    rows: list[tuple] = []
    head = extra_head()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Client(upstream_port, head, rows), "127.0.0.1", port)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), int(sys.argv[2])))
