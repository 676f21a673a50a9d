"""The gateway's HTTP/1.1 server: one asyncio protocol per client connection.

Lean on purpose. On a machine the engines saturate, the gateway's CPU per proxied request is
throughput lost, and aiohttp's server (a request object with multidicts and a payload
stream, a response object, its writer, middleware hooks) cost about half of it. A request
here is its head parsed strictly (h1parse.py), its body fed to a `Body` as it arrives, and
one task running the handler; the answer is one write.

Behaviour kept from the aiohttp server it replaces:
- keep-alive (HTTP/1.1, unless `Connection: close`), pipelined requests in order;
- bodies by Content-Length or chunked, read by the handler within its own bounds (body.py),
  reading paused while `h1body.PAUSE_BYTES` wait unread; `Expect: 100-continue` answered when the
  handler first waits for the body (417 for any other expectation);
- an answer given before the body was read whole closes the connection after a lingering
  close (the client sees the answer, not a reset);
- a client that leaves cancels its request's handler (the upstream request is closed);
- malformed requests get a JSON 400 (431, 501, 505) and the connection is closed; a handler
  that raises gets a JSON 500 and its error is logged (quietly: guard.QuietFilter);
- connections are admitted, capped and timed out by the Guard (guard.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from planner.adjuster.gateway.h1body import Body
from planner.adjuster.gateway.h1parse import MAX_HEAD, BadRequest, Headers, body_length, parse_head
from planner.adjuster.gateway.reply import Response, StreamResponse, error, render_head

if TYPE_CHECKING:
    from planner.adjuster.gateway.guard import Guard

LINGER_S = 5.0  # how long an unread body is read and dropped after the answer
_KINDS = {
    431: "RequestHeaderFieldsTooLargeError", 501: "NotImplementedError",
    505: "HTTPVersionNotSupportedError",
}  # fmt: skip


class Request:
    """One request: its head, its body, who sent it (`caller`, set by auth.py) and the key
    slot it holds (`admitted`)."""

    __slots__ = (
        "admitted", "body", "caller", "conn", "headers", "keep_alive", "method", "path",
        "started", "version",
    )  # fmt: skip

    def __init__(
        self,
        conn: Conn,
        method: str,
        path: str,
        version: tuple[int, int],
        headers: Headers,
        length: int | None,
    ):
        self.conn, self.method, self.path, self.version = conn, method, path, version
        self.headers, self.body = headers, Body(conn, length)
        self.keep_alive = version == (1, 1) and "close" not in headers.get("connection", "").lower()
        self.caller: Any = None
        self.admitted: str | None = None
        self.started = False  # a streamed answer's head was sent

    @property
    def remote(self) -> str | None:
        """The client's address."""
        return self.conn.peer

    @property
    def content_length(self) -> int | None:
        return self.body.length


Handler = Callable[[Request], Awaitable[Response | StreamResponse]]


class Server:
    """The protocol factory for `loop.create_server`, and what its connections share."""

    def __init__(self, handler: Handler, guard: Guard, logger: logging.Logger):
        self.handler, self.guard, self.log = handler, guard, logger
        self.stopping = False  # no new request on a kept-alive connection

    def __call__(self) -> Conn:
        return Conn(self)

    async def shutdown(self, timeout_s: float = 60.0) -> None:
        """Close idle connections; wait for the requests in flight, then close the rest."""
        self.stopping = True
        conns = list(self.guard.open)
        for c in conns:
            if not c.busy:
                c.abort()
        tasks = [c.task for c in conns if c.task is not None and not c.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        for c in list(self.guard.open):
            c.abort()


class Conn(asyncio.Protocol):
    """One client connection: requests parsed, handled one at a time, answered in order."""

    def __init__(self, server: Server):
        self.server, self.guard = server, server.guard
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.closing = False
        self.busy = False  # a request's handler runs (its head is in) until its answer ends
        self.header_since: float | None = None  # first byte of a head not yet whole
        self.idle_since: float | None = None  # no request since (keep-alive timeout)
        self.task: asyncio.Task | None = None
        self._buf = b""  # bytes of the next head (or pipelined requests)
        self._body: Body | None = None  # the body now arriving
        self._drain: asyncio.Future | None = None
        self._write_paused = self._read_paused = False
        self._linger: asyncio.TimerHandle | None = None

    # ----- transport events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self.guard.admit(self):
            self.closing = True
            transport.abort()
            return
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        self.idle_since = self.guard.clock()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.guard.forget(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()  # the client left: its handler stops (and its upstream request)
        if self._body is not None:
            self._body.fail(ConnectionResetError("the client closed the connection"))
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(ConnectionResetError("the client closed the connection"))
        if self._linger is not None:
            self._linger.cancel()

    def data_received(self, data: bytes) -> None:
        if self._linger is not None:
            return  # an unread body after the answer: dropped
        body = self._body
        if body is not None:
            data = body.feed(data)
            if body.done or body.error is not None:
                self._body = None
            if not data or body.error is not None:
                return
        if self.busy:  # a pipelined request: read after this one's answer
            self._buf += data
            if len(self._buf) > MAX_HEAD:
                self.pause_reading()
            return
        if self.header_since is None:
            self.header_since = self.guard.clock()
        seen = len(self._buf)
        self._buf = self._buf + data if seen else data
        self._next(max(seen - 3, 0))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # ----- requests

    def _next(self, start: int = 0) -> None:
        """Start the request whose head is in the buffer, if it is whole (`start`: where
        its end may be, past what earlier searches saw: a head sent a byte at a time is
        searched once, not once per byte)."""
        buf = self._buf
        if buf[:2] == b"\r\n":  # empty lines before a request line are allowed
            buf = buf.lstrip(b"\r\n")
            start = 0
        end = buf.find(b"\r\n\r\n", start)
        if end < 0 or end > MAX_HEAD:
            self._buf = buf
            if len(buf) > MAX_HEAD:
                self._refuse(BadRequest(431, f"the request head exceeds {MAX_HEAD} bytes"))
            return
        try:
            method, path, version, headers = parse_head(buf[:end])
            req = Request(self, method, path, version, headers, body_length(headers))
        except BadRequest as e:
            self._refuse(e)
            return
        self.busy, self.header_since, self.idle_since = True, None, None
        body, rest = req.body, buf[end + 4 :]
        expect = headers.get("expect")
        if expect and version == (1, 1):
            if expect.lower() != "100-continue":
                self._buf = rest
                refused = error(417, f"unknown Expect: {expect[:100]}", "ExpectationFailedError")
                self.answer(req, refused)  # the body unread: a lingering close
                self._finish(req)
                return
            body.expect = not body.done  # until a byte of it comes (h1body.py)
        if not body.done and rest:
            rest = body.feed(rest)
        if not body.done and body.error is None:
            self._body = body
        self._buf = rest
        self.task = asyncio.get_running_loop().create_task(self._run(req))

    async def _run(self, req: Request) -> None:
        try:
            resp = await self.server.handler(req)
            if isinstance(resp, StreamResponse):
                if not resp.prepared:
                    await resp.prepare(req)
                await resp.write_eof()
            else:
                self.answer(req, resp)
        except (asyncio.CancelledError, ConnectionError):
            self.abort()  # the client left
            return
        except Exception as e:
            self.server.log.exception("%s %s failed: %s", req.method, req.path[:100], e)
            if req.started:  # a stream already begun cannot become an error answer
                self.abort()
                return
            req.keep_alive = False
            self.answer(req, error(500, "the gateway failed on this request (logged)",
                                   "InternalServerError"))  # fmt: skip
        self._finish(req)

    def answer(self, req: Request, resp: Response) -> None:
        """Write a whole answer (its head only, to HEAD)."""
        req.keep_alive = req.keep_alive and req.body.done and not self.server.stopping
        framing = f"Content-Length: {len(resp.body)}\r\n"
        if not req.keep_alive:
            framing += "Connection: close\r\n"
        self._write(resp, req.method, framing)

    def _write(self, resp: Response, method: str, framing: str) -> None:
        if self.closing or self.transport is None:
            return
        body = resp.body
        head = render_head(resp.status, resp.headers, framing)
        if method == "HEAD" or not body:
            self.transport.write(head)
        elif len(body) <= 16384:  # one write, one copy: cheaper than two sends
            self.transport.write(head + body)
        else:
            self.transport.writelines((head, body))

    def _finish(self, req: Request) -> None:
        """After an answer: the next request, or the connection's end."""
        self.task = None
        if self.closing:
            return
        if not (req.keep_alive and req.body.done and not self.server.stopping):
            if req.body.done:
                self.close()
            else:
                self._linger_close()
            return
        self.busy, self.idle_since = False, self.guard.clock()
        self.resume_reading()
        if self._buf:
            self.header_since = self.guard.clock()
            self._next()

    def _refuse(self, e: BadRequest) -> None:
        """Answer a request that cannot be read, and close."""
        self.busy, self.header_since = True, None
        resp = error(e.status, str(e), _KINDS.get(e.status, "BadRequestError"))
        self._write(resp, "GET", f"Content-Length: {len(resp.body)}\r\nConnection: close\r\n")
        self._linger_close()

    # ----- writing and closing

    def write(self, data: bytes) -> None:
        if not self.closing and self.transport is not None:
            self.transport.write(data)

    async def drain(self) -> None:
        if self.closing:
            raise ConnectionResetError("the client closed the connection")
        if self._write_paused:
            self._drain = asyncio.get_running_loop().create_future()
            await self._drain

    def pause_reading(self) -> None:
        if not self._read_paused and self.transport is not None and not self.closing:
            self._read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._read_paused and self.transport is not None and not self.closing:
            self._read_paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        """Close once what was written is sent."""
        if self.transport is not None and not self.closing:
            self.closing = True
            self.transport.close()

    def abort(self) -> None:
        """Close at once (a client that left, an idle connection evicted or timed out)."""
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    def _linger_close(self) -> None:
        """Send what was written and the end of our side, then drop what the client still
        sends for LINGER_S: closing with unread bytes would reset the connection, and the
        client might lose its answer."""
        if self.transport is None or self.closing:
            return
        self._body = None
        self.resume_reading()
        if not self.transport.can_write_eof():
            self.close()
            return
        self.transport.write_eof()
        self._linger = asyncio.get_running_loop().call_later(LINGER_S, self.abort)
