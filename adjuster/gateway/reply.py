"""The gateway's answers as its server (h1server.py) writes them: whole (`Response`) or
streamed (`StreamResponse`, chunked). Plain objects: a proxied request makes one, and
aiohttp's (header multidicts, cookies, compression hooks) cost more CPU than the rest of it.
"""

from __future__ import annotations

import functools
import http
import json
from typing import Any, Protocol

REASONS = {s.value: s.phrase for s in http.HTTPStatus} | {499: "Client Closed Request"}
JSON = "application/json; charset=utf-8"


def render_head(status: int, headers: dict[str, str], framing: str) -> bytes:
    """The status line and headers of an answer; `framing`: its Content-Length or
    Transfer-Encoding line(s) and any Connection line, each ending in CRLF."""
    return _status_and_headers(status, tuple(headers.items())) + (framing + "\r\n").encode(
        "latin-1", "replace"
    )


@functools.lru_cache(maxsize=256)
def _status_and_headers(status: int, headers: tuple[tuple[str, str], ...]) -> bytes:
    """Rendered once per status and headers: a proxied answer's are the same every time
    (its Content-Type, the model that served it)."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\n"]
    lines += [f"{k}: {v}\r\n" for k, v in headers]
    return "".join(lines).encode("latin-1", "replace")


class Response:
    """A whole answer: status, headers and body (Content-Length is added when written)."""

    __slots__ = ("body", "headers", "status")
    prepared = False

    def __init__(
        self,
        body: bytes = b"",
        status: int = 200,
        headers: dict[str, str] | None = None,
        content_type: str | None = None,
    ):
        self.body, self.status = body, status
        self.headers = headers if headers is not None else {}
        if content_type is not None:
            self.headers["Content-Type"] = content_type


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(obj).encode(), status, {"Content-Type": JSON, **(headers or {})})


def error(
    status: int, message: str, kind: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """An OpenAI-style JSON error body."""
    body = {"error": {"message": message, "type": kind, "code": status, **extra}}
    return json_response(body, status, headers)


class _Server(Protocol):
    @property
    def stopping(self) -> bool:
        """No new request on a kept-alive connection."""
        ...


class _Conn(Protocol):
    """The connection a streamed answer is written to (h1server.Conn)."""

    @property
    def closing(self) -> bool: ...
    @property
    def server(self) -> _Server: ...

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...


class StreamRequest(Protocol):
    """What a streamed answer uses of its request (h1server.Request, which imports this
    module: named here by its members, not imported)."""

    @property
    def conn(self) -> _Conn: ...
    @property
    def version(self) -> tuple[int, int]: ...

    keep_alive: bool
    started: bool  # the answer's head was sent


class StreamResponse:
    """An answer written as it comes (server-sent events): `prepare` sends the head,
    `write` one chunk, `write_eof` the end. Writing to a client that left raises
    ConnectionResetError."""

    __slots__ = ("_chunked", "_request", "eof", "headers", "prepared", "status")

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None):
        self.status, self.headers = status, headers if headers is not None else {}
        self.prepared = self.eof = self._chunked = False
        self._request: StreamRequest | None = None

    async def prepare(self, request: StreamRequest) -> None:
        conn = request.conn
        if conn.closing:
            raise ConnectionResetError("the client closed the connection")
        self._request, self.prepared = request, True
        request.started = True
        self._chunked = request.version >= (1, 1)  # HTTP/1.0: the body ends with the connection
        framing = "Transfer-Encoding: chunked\r\n" if self._chunked else ""
        request.keep_alive = request.keep_alive and self._chunked and not conn.server.stopping
        if not request.keep_alive:
            framing += "Connection: close\r\n"
        conn.write(render_head(self.status, self.headers, framing))
        await conn.drain()

    async def write(self, data: bytes) -> None:
        request = self._request
        assert request is not None, "prepare() first"
        if not data:  # an empty chunk would end the body
            return
        conn = request.conn
        if conn.closing:
            raise ConnectionResetError("the client closed the connection")
        if self._chunked:
            conn.write(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            conn.write(data)
        await conn.drain()

    async def write_eof(self) -> None:
        request = self._request
        assert request is not None, "prepare() first"
        if self.eof:
            return
        self.eof = True
        if self._chunked and not request.conn.closing:
            request.conn.write(b"0\r\n\r\n")
