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
"""

from __future__ import annotations

import asyncio
import functools
from collections import defaultdict

import httptools

MAX_HEAD = 64 * 1024  # bytes of an answer's head
_MAX_IDLE = 64  # kept-alive connections per engine


class UpstreamError(ConnectionError):
    """The engine closed the connection or answered something that is not HTTP/1.1."""


@functools.lru_cache(maxsize=1024)
def render_head(host: str, port: int, path: str, auth: tuple[tuple[str, str], ...]) -> bytes:
    """The request line and headers of a POST, up to its Content-Length value."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in auth]
    return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")


class _Conn(asyncio.Protocol):
    """One kept-alive connection to an engine and the answer it is reading (one request at a
    time), parsed by httptools (llhttp) as its bytes arrive: no stream reader between. An
    answer without a body (204, 304) ends with its head; one without a length, with the
    connection."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.got = False  # a byte of this request's answer came
        self._waiter: asyncio.Future | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._ctype = b""
        self._parts: list[bytes] = []
        self._head_bytes = 0
        self._headed = False
        self._framed = False  # a Content-Length or Transfer-Encoding says where it ends

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        w, parser = self._waiter, self._parser
        if w is None or w.done():
            return
        if parser is not None and self._headed and not self._framed:
            body = b"".join(self._parts)  # an answer that ends with the connection
            w.set_result((parser.get_status_code(), self._content_type(), body, False))
        else:
            w.set_exception(UpstreamError(f"the engine closed the connection ({exc or 'EOF'})"))

    def request(self, msg: bytes) -> asyncio.Future:
        """Send a request; the future of its (status, Content-Type, body, reusable)."""
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._parser = httptools.HttpResponseParser(self)
        self._ctype = b""
        self._parts = []
        self._head_bytes = 0
        self._headed = self._framed = False
        self.got = False
        self.transport.write(msg)
        return self._waiter

    def data_received(self, data: bytes) -> None:
        w, parser = self._waiter, self._parser
        if w is None or w.done() or parser is None:  # bytes nobody asked for: not reusable
            self.abort()
            return
        self.got = True
        if not self._headed:
            self._head_bytes += len(data)
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as e:
            if not w.done():
                w.set_exception(UpstreamError(f"broken answer: {e or type(e).__name__}"))
            self.abort()
            return
        if not self._headed and self._head_bytes > MAX_HEAD and not w.done():
            w.set_exception(UpstreamError("broken answer: the head is too long"))
            self.abort()

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        low = name.lower()
        if low == b"content-type":
            self._ctype = value
        elif low in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        self._headed = True

    def on_body(self, data: bytes) -> None:
        self._parts.append(data)

    def on_message_complete(self) -> None:
        w, parser = self._waiter, self._parser
        if w is None or w.done() or parser is None:
            return
        parts = self._parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        keep = parser.should_keep_alive() and not self.lost
        w.set_result((parser.get_status_code(), self._content_type(), body, keep))

    def _content_type(self) -> str:
        return self._ctype.decode("latin-1") if self._ctype else "application/json"

    def abort(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.abort()


class Http1:
    """Kept-alive connections by (host, port) and the one request they make."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Conn]] = defaultdict(list)

    async def post(self, host: str, port: int, head: bytes, body: bytes) -> tuple[int, str, bytes]:
        """(status, Content-Type, body) of the answer to a POST (`head`: render_head's)."""
        msg = head + str(len(body)).encode() + b"\r\n\r\n" + body
        for attempt in (0, 1):
            conn, reused = self._take((host, port)), True
            if conn is None:
                try:
                    _, conn = await asyncio.get_running_loop().create_connection(_Conn, host, port)
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
                self._put((host, port), conn)
            else:
                conn.abort()
            return status, ctype, data
        raise AssertionError("unreachable")

    def _take(self, key: tuple[str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.lost and conn.transport is not None and not conn.transport.is_closing():
                return conn
            conn.abort()
        return None

    def _put(self, key: tuple[str, int], conn: _Conn) -> None:
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
