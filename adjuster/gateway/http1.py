"""A lean HTTP/1.1 client for the gateway's hot path: a non-streamed POST to an engine.

aiohttp's client costs more CPU per request than the rest of a proxied request's handling
(headers merged and rendered, a request object, tracing and cookie hooks); on a machine the
engines saturate, that CPU is throughput lost. This client sends one pre-rendered head and
the body in one write on a kept-alive connection and reads a Content-Length or chunked
answer whole. Streams, probes and wake checks keep aiohttp's client (upstream.py).

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

_MAX_IDLE = 64  # kept-alive connections per engine


class UpstreamError(ConnectionError):
    """The engine closed the connection or answered something that is not HTTP/1.1."""


@functools.lru_cache(maxsize=1024)
def render_head(host: str, port: int, path: str, auth: tuple[tuple[str, str], ...]) -> bytes:
    """The request line and headers of a POST, up to its Content-Length value."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in auth]
    return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")


_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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
                    conn, reused = await asyncio.open_connection(host, port), False
                except OSError as e:  # refused, unreachable: no answer
                    raise UpstreamError(f"cannot connect: {e}") from e
            reader, writer = conn
            try:
                writer.write(msg)
                raw = await reader.readuntil(b"\r\n\r\n")
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
                writer.transport.abort()
                if reused and attempt == 0:
                    continue  # closed by the engine as it was reused: a new connection
                raise UpstreamError(f"no answer: {e or type(e).__name__}") from e
            except BaseException:
                writer.transport.abort()
                raise
            try:
                status, ctype, data, keep = await _answer(reader, raw)
            except BaseException as e:
                writer.transport.abort()
                if isinstance(e, (OSError, EOFError, ValueError, asyncio.LimitOverrunError)):
                    raise UpstreamError(f"broken answer: {e or type(e).__name__}") from e
                raise
            if keep:
                self._put((host, port), conn)
            else:
                writer.transport.abort()
            return status, ctype, data
        raise AssertionError("unreachable")

    def _take(self, key: tuple[str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            reader, writer = idle.pop()
            if not writer.transport.is_closing() and not reader.at_eof():
                return reader, writer
            writer.transport.abort()
        return None

    def _put(self, key: tuple[str, int], conn: _Conn) -> None:
        idle = self._idle[key]
        if len(idle) < _MAX_IDLE:
            idle.append(conn)
        else:
            conn[1].transport.abort()

    def close(self) -> None:
        for idle in self._idle.values():
            for _, writer in idle:
                writer.transport.abort()
        self._idle.clear()


async def _answer(reader: asyncio.StreamReader, raw: bytes) -> tuple[int, str, bytes, bool]:
    """Status, Content-Type, body and whether the connection may be reused (`raw`: the
    status line and headers, up to the blank line)."""
    version, code = raw[: raw.index(b"\r\n")].split(b" ", 2)[:2]
    status = int(code)
    low = raw.lower()  # header names are case-insensitive; only four are read
    keep = version == b"HTTP/1.1" and _header(raw, low, b"connection").lower() != b"close"
    length = _header(raw, low, b"content-length")
    if b"chunked" in _header(raw, low, b"transfer-encoding").lower():
        data = await _chunked(reader)
    elif length or b"\r\ncontent-length:" in low:  # (an empty value is refused by int())
        data = await reader.readexactly(int(length))
    else:  # the answer ends with the connection
        data, keep = await reader.read(), False
    ctype = _header(raw, low, b"content-type")
    return status, ctype.decode("latin-1") if ctype else "application/json", data, keep


def _header(raw: bytes, low: bytes, name: bytes) -> bytes:
    """The value of header `name` (lower case) in `raw` (whose lower case is `low`); b""
    when absent. A search, not a parse of every line: this runs once per proxied request."""
    at = low.find(b"\r\n" + name + b":")
    if at < 0:
        return b""
    start = at + len(name) + 3
    return raw[start : raw.index(b"\r\n", start)].strip()


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then a blank line
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
