"""A request's body as the server (h1server.py) receives it, already de-chunked by the
parser; the handler reads it in pieces within its own bounds (body.py). Reading from the
client pauses while `PAUSE_BYTES` wait unread, so a body is never held whole beyond what
the handler has taken.

`Budget`: the body bytes the gateway holds for the requests in flight, in all and per key.
A request takes its declared Content-Length when its head is admitted (a chunked body
takes its bytes as they come) and gives it back when its answer is done; beyond either
bound the request gets 503 with Retry-After, before a byte of its body is read.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Protocol

PAUSE_BYTES = 1 << 20  # unread body bytes at which reading pauses


class BadRequest(Exception):
    """A request the server refuses to read: `status` (400, 413, 431, 501, 505) and why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class OverBudget(Exception):
    """The gateway (or the key) holds as many body bytes as it may: 503, Retry-After."""


class Wire(Protocol):
    """The connection a body arrives on (h1server.Conn)."""

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def write(self, data: bytes) -> None: ...


class Budget:
    """Body bytes held by the requests in flight: at most `total_bytes` in all and
    `per_key_bytes` under one key name ("" for requests without a key)."""

    def __init__(self, total_bytes: int, per_key_bytes: int):
        self.total_bytes, self.per_key_bytes = total_bytes, per_key_bytes
        self.held = 0
        self.by_key: dict[str, int] = collections.defaultdict(int)
        self.refused = 0  # requests refused for lack of budget

    def take(self, key: str, n: int) -> bool:
        """Hold `n` more bytes for `key`; False (nothing held) beyond either bound."""
        if self.held + n > self.total_bytes or self.by_key[key] + n > self.per_key_bytes:
            self.refused += 1
            return False
        self.held += n
        self.by_key[key] += n
        return True

    def give(self, key: str, n: int) -> None:
        self.held -= n
        left = self.by_key[key] - n
        if left:
            self.by_key[key] = left
        else:
            del self.by_key[key]


class Body:
    """A request's body as it arrives; `read` takes it in pieces (b"" at its end)."""

    __slots__ = ("_buf", "_conn", "_waiter", "_whole", "done", "error", "expect", "length")

    def __init__(self, conn: Wire, length: int | None):
        self._conn, self.length = conn, length  # length None: chunked
        self._buf = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self.done = length == 0  # all of it is in
        self.error: Exception | None = None  # malformed chunks, over budget, the client left
        self.expect = False  # `100 Continue` is owed before the first wait
        self._whole: bytes | None = None  # what `ready` returned

    def feed(self, data: bytes) -> None:
        """Bytes of the body, as the parser gives them."""
        self._buf += data
        self.expect = False  # the client sends without waiting: no `100 Continue`
        if len(self._buf) >= PAUSE_BYTES:
            self._conn.pause_reading()
        if self._waiter is not None:
            self._wake()

    def end(self) -> None:
        """All of the body is in."""
        self.done = True
        if self._waiter is not None:
            self._wake()

    def fail(self, e: Exception) -> None:
        if self.error is None and not self.done:
            self.error = e
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def ready(self) -> bytes | None:
        """The whole body, when all of it came (with the head, usually) and none was read;
        the same bytes on every call."""
        if not self.done:
            return None
        if self._whole is None:
            self._whole = bytes(self._buf)
            self._buf = bytearray()
        return self._whole

    async def read(self, n: int) -> bytes:
        """Up to `n` bytes as they come; b"" at the end. A malformed or over-long body raises
        BadRequest, one over the budget OverBudget."""
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
