"""A request's body as it arrives at the gateway's server (h1server.py), by Content-Length
or chunked (h1parse.Chunked); the handler reads it in pieces within its own bounds
(body.py). Reading from the client pauses while `PAUSE_BYTES` wait unread, so a body is
never held whole beyond what the handler has taken."""

from __future__ import annotations

import asyncio
from typing import Protocol

from planner.adjuster.gateway.h1parse import BadRequest, Chunked

PAUSE_BYTES = 1 << 20  # unread body bytes at which reading pauses


class Wire(Protocol):
    """The connection a body arrives on (h1server.Conn)."""

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def write(self, data: bytes) -> None: ...


class Body:
    """A request's body as it arrives; `read` takes it in pieces (b"" at its end)."""

    __slots__ = (
        "_buf",
        "_chunked",
        "_conn",
        "_left",
        "_waiter",
        "done",
        "error",
        "expect",
        "length",
    )

    def __init__(self, conn: Wire, length: int | None):
        self._conn, self.length = conn, length  # length None: chunked
        self._chunked = Chunked() if length is None else None
        self._left = length or 0
        self._buf = bytearray()
        self._waiter: asyncio.Future | None = None
        self.done = length == 0  # all of it is in
        self.error: Exception | None = None  # malformed chunks, or the client left
        self.expect = False  # `100 Continue` is owed before the first wait

    def feed(self, data: bytes) -> bytes:
        """Take what belongs to the body; the bytes past its end (the next request)."""
        if self._chunked is not None:
            try:
                part, rest = self._chunked.feed(data)
            except BadRequest as e:
                self.fail(e)
                return b""
            self.done = self._chunked.done
        else:
            part, rest = data[: self._left], data[self._left :]
            self._left -= len(part)
            self.done = not self._left
        if part:
            self._buf += part
            self.expect = False  # the client sends without waiting: no `100 Continue`
            if len(self._buf) >= PAUSE_BYTES and not self.done:
                self._conn.pause_reading()
        self._wake()
        return rest

    def fail(self, e: Exception) -> None:
        if self.error is None and not self.done:
            self.error = e
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def ready(self) -> bytes | None:
        """The whole body, when all of it came (with the head, usually) and none was read."""
        if not self.done:
            return None
        out = bytes(self._buf)
        self._buf.clear()
        return out

    async def read(self, n: int) -> bytes:
        """Up to `n` bytes as they come; b"" at the end. Malformed chunks raise BadRequest."""
        while not self._buf:
            if self.error is not None:
                raise self.error
            if self.done:
                return b""
            if self.expect:
                self.expect = False
                self._conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        out = bytes(self._buf[:n])
        del self._buf[:n]
        if len(self._buf) < PAUSE_BYTES // 2:
            self._conn.resume_reading()
        return out
