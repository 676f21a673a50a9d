"""A lean HTTP/1.1 client for the gateway's hot path: a non-streamed POST to an engine.

aiohttp's client costs more CPU per request than the rest of a proxied request's handling
(headers merged and rendered, a request object, tracing and cookie hooks); on a machine the
engines saturate, that CPU is throughput lost. This client sends one pre-rendered head and
the body in one write on a kept-alive connection and reads a Content-Length or chunked
answer whole, parsed in its protocol's `data_received` (asyncio's stream reader and writer
cost more CPU than the parse). Streams, probes and wake checks keep aiohttp's client (upstream.py).

Failures are `ConnectionError`s (`UpstreamError`), as aiohttp's are `ClientError`s:
forward.py treats both as "no answer". A kept-alive connection that the engine closed while
it was idle (uvicorn closes them after 5 s) is noticed before reuse; one that closes just
as the request is sent is tried once more on a new connection, before any byte of an answer.
A cancelled request (the client left) aborts its connection: the engine aborts the request.

The answer goes to a `Sink`'s callbacks, as its parser reads it: `post` awaits a future that
a sink sets, and the gateway's common case (exchange.py) is itself the sink, so that it runs
in callbacks with no task.
"""

from __future__ import annotations

import asyncio
import functools
from collections import defaultdict
from typing import Protocol

import httptools

MAX_HEAD = 64 * 1024  # bytes of an answer's head
_MAX_IDLE = 64  # kept-alive connections per engine


Answer = tuple[int, str, bytes, bool]  # status, Content-Type, body, whether reusable


class UpstreamError(ConnectionError):
    """The engine closed the connection or answered something that is not HTTP/1.1."""


class Sink(Protocol):
    """Where one answer goes: exactly one of the two is called, once."""

    def answered(self, status: int, ctype: str, body: bytes, keep: bool) -> None:
        """The whole answer (`keep`: the connection may take another request)."""
        ...

    def failed(self, error: UpstreamError) -> None:
        """No whole answer: the connection closed or the answer was broken."""
        ...


class _Waiter:
    """A sink that sets a future: the answer's (status, Content-Type, body, reusable)."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[Answer]) -> None:
        self.future = future

    def answered(self, status: int, ctype: str, body: bytes, keep: bool) -> None:
        if not self.future.done():
            self.future.set_result((status, ctype, body, keep))

    def failed(self, error: UpstreamError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


@functools.lru_cache(maxsize=1024)
def render_head(host: str, port: int, path: str, auth: tuple[tuple[str, str], ...]) -> bytes:
    """The request line and headers of a POST, up to its Content-Length value."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in auth]
    return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")


def message(head: bytes, body: bytes) -> bytes:
    """A whole POST: `head` (render_head's), the body's length, the body."""
    return head + str(len(body)).encode() + b"\r\n\r\n" + body


class Connection(asyncio.Protocol):
    """One kept-alive connection to an engine and the answer it is reading (one request at a
    time), parsed by httptools (llhttp) as its bytes arrive: no stream reader between. An
    answer without a body (204, 304) ends with its head; one without a length, with the
    connection. The answer goes to the request's sink once the parser is done with the bytes
    that held its end (a sink may send the next request on this connection)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.got = False  # a byte of this request's answer came
        self._sink: Sink | None = None  # of the request in flight; None once told
        self._parser: httptools.HttpResponseParser | None = None
        self._ctype = b""
        self._parts: list[bytes] = []
        self._head_bytes = 0
        self._headed = False
        self._framed = False  # a Content-Length or Transfer-Encoding says where it ends
        self._whole = False  # the parser read the answer's end...
        self._keep = False  # ...and the connection may take another request
        self._status = 0  # of the answer read whole

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # one parser for every answer on the connection (llhttp reads one after another)
        self._parser = httptools.HttpResponseParser(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        sink, parser = self._sink, self._parser
        if sink is None:
            return
        self._sink = None
        if parser is not None and self._headed and not self._framed:
            body = b"".join(self._parts)  # an answer that ends with the connection
            sink.answered(parser.get_status_code(), self._content_type(), body, False)
        else:
            sink.failed(UpstreamError(f"the engine closed the connection ({exc or 'EOF'})"))

    def send(self, msg: bytes, sink: Sink) -> None:
        """Send a request whose answer goes to `sink`."""
        assert self.transport is not None
        self._sink = sink
        self._ctype = b""
        self._parts = []
        self._head_bytes = 0
        self._headed = self._framed = self._whole = False
        self.got = False
        self.transport.write(msg)

    def request(self, msg: bytes) -> asyncio.Future[Answer]:
        """Send a request; the future of its (status, Content-Type, body, reusable)."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.send(msg, _Waiter(future))
        return future

    def data_received(self, data: bytes) -> None:
        sink, parser = self._sink, self._parser
        if sink is None or parser is None:  # bytes nobody asked for: not reusable
            self.abort()
            return
        self.got = True
        if not self._headed:
            self._head_bytes += len(data)
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(f"broken answer: {e or type(e).__name__}")
            return
        if self._whole:
            self._sink = None
            parts = self._parts
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            keep = self._keep and not self.lost
            sink.answered(self._status, self._content_type(), body, keep)
        elif not self._headed and self._head_bytes > MAX_HEAD:
            self._fail("broken answer: the head is too long")

    def _fail(self, why: str) -> None:
        sink, self._sink = self._sink, None
        self.abort()
        if sink is not None:
            sink.failed(UpstreamError(why))

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        low = name if name.islower() else name.lower()  # (uvicorn sends lower-case names)
        if low == b"content-type":
            self._ctype = value
        elif low in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        self._headed = True

    def on_body(self, data: bytes) -> None:
        self._parts.append(data)

    def on_message_complete(self) -> None:
        self._whole = True
        if self._parser is not None:  # (read here: the parser is ready for the next answer)
            self._keep = self._parser.should_keep_alive()
            self._status = self._parser.get_status_code()

    def _content_type(self) -> str:
        return self._ctype.decode("latin-1") if self._ctype else "application/json"

    def abort(self) -> None:
        """Close at once; the request in flight (if any) is told by `connection_lost`."""
        self.lost = True
        if self.transport is not None:
            self.transport.abort()


class Http1:
    """Kept-alive connections by (host, port) and the one request they make."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[Connection]] = defaultdict(list)

    async def post(self, host: str, port: int, head: bytes, body: bytes) -> tuple[int, str, bytes]:
        """(status, Content-Type, body) of the answer to a POST (`head`: render_head's)."""
        msg = message(head, body)
        for attempt in (0, 1):
            conn, reused = self.take((host, port)), True
            if conn is None:
                try:
                    _, conn = await asyncio.get_running_loop().create_connection(
                        Connection, host, port
                    )
                except OSError as e:  # refused, unreachable: no answer
                    raise UpstreamError(f"cannot connect: {e}") from e
                reused = False
            try:
                status, ctype, data, keep = await conn.request(msg)
            except UpstreamError:
                conn.abort()
                if reused and attempt == 0 and not conn.got:
                    continue  # closed by the engine as it was reused: a new connection
                raise
            except BaseException:  # cancelled (the client left): the engine aborts it
                conn.abort()
                raise
            if keep:
                self.put((host, port), conn)
            else:
                conn.abort()
            return status, ctype, data
        raise AssertionError("unreachable")

    def take(self, key: tuple[str, int]) -> Connection | None:
        """A kept-alive connection to (host, port) that is still open, or None."""
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.lost and conn.transport is not None and not conn.transport.is_closing():
                return conn
            conn.abort()
        return None

    def put(self, key: tuple[str, int], conn: Connection) -> None:
        """Keep `conn` for the next request (closed beyond `_MAX_IDLE` kept)."""
        idle = self._idle[key]
        if len(idle) < _MAX_IDLE:
            idle.append(conn)
        else:
            conn.abort()

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.abort()
        self._idle.clear()
