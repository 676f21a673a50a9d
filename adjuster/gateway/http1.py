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

from planner.adjuster.gateway.h1parse import MAX_HEAD, BadRequest, Chunked

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
    time): parsed as its bytes arrive, no stream reader between."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.got = False  # a byte of this request's answer came
        self._waiter: asyncio.Future | None = None
        self._buf = b""
        self._head: tuple[int, str, int | None, bool] | None = None  # status, type, length, keep
        self._chunks: Chunked | None = None
        self._parts: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        w, head = self._waiter, self._head
        if w is None or w.done():
            return
        if (
            head is not None and head[2] is None and self._chunks is None
        ):  # ends with the connection
            w.set_result((head[0], head[1], self._buf, False))
        else:
            w.set_exception(UpstreamError(f"the engine closed the connection ({exc or 'EOF'})"))

    def request(self, msg: bytes) -> asyncio.Future:
        """Send a request; the future of its (status, Content-Type, body, reusable)."""
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._buf, self._head, self._chunks, self._parts, self.got = b"", None, None, [], False
        self.transport.write(msg)
        return self._waiter

    def data_received(self, data: bytes) -> None:
        w = self._waiter
        if w is None or w.done():  # bytes nobody asked for: not reusable
            self.abort()
            return
        self.got = True
        self._buf = self._buf + data if self._buf else data
        try:
            out = self._parse()
        except (ValueError, BadRequest) as e:
            w.set_exception(UpstreamError(f"broken answer: {e or type(e).__name__}"))
            self.abort()
            return
        if out is not None:
            w.set_result(out)

    def _parse(self) -> tuple[int, str, bytes, bool] | None:
        if self._head is None:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD:
                    raise ValueError("the answer's head is too long")
                return None
            raw, self._buf = self._buf[: end + 2], self._buf[end + 4 :]
            self._head = head = _answer_head(raw)
            if head[2] == -1:
                self._chunks = Chunked()
        status, ctype, length, keep = self._head
        if self._chunks is not None:
            data, rest = self._chunks.feed(self._buf)
            self._buf = b""
            self._parts.append(data)
            if not self._chunks.done:
                return None
            return status, ctype, b"".join(self._parts), keep and not rest
        if length is None or len(self._buf) < length:
            return None  # (no length: the answer ends with the connection)
        return status, ctype, self._buf[:length], keep and len(self._buf) == length

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


def _answer_head(raw: bytes) -> tuple[int, str, int | None, bool]:
    """Status, Content-Type, body length (-1: chunked; None: until the connection ends)
    and whether the connection may be reused (`raw`: the status line and headers, each
    line ending in CRLF)."""
    version, code = raw[: raw.index(b"\r\n")].split(b" ", 2)[:2]
    status = int(code)
    low = raw.lower()  # header names are case-insensitive; only four are read
    keep = version == b"HTTP/1.1" and _header(raw, low, b"connection").lower() != b"close"
    length: int | None = None
    if b"chunked" in _header(raw, low, b"transfer-encoding").lower():
        length = -1
    else:
        cl = _header(raw, low, b"content-length")
        if cl or b"\r\ncontent-length:" in low:  # (an empty value is refused by int())
            length = int(cl)
            if length < 0:
                raise ValueError("a negative Content-Length")
        else:
            keep = False
    ctype = _header(raw, low, b"content-type")
    return status, ctype.decode("latin-1") if ctype else "application/json", length, keep


def _header(raw: bytes, low: bytes, name: bytes) -> bytes:
    """The value of header `name` (lower case) in `raw` (whose lower case is `low`); b""
    when absent. A search, not a parse of every line: this runs once per proxied request."""
    at = low.find(b"\r\n" + name + b":")
    if at < 0:
        return b""
    start = at + len(name) + 3
    return raw[start : raw.index(b"\r\n", start)].strip()
