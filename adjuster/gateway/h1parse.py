"""Parsing what a client sends the gateway: an HTTP/1.x request head and a chunked body.

Strict where laxness would let one request be read two ways (request smuggling): CRLF line
ends only, header names are tokens, no obsolete line folding, no whitespace before the
colon, one Content-Length (digits only), and Transfer-Encoding only `chunked`, never with a
Content-Length. Anything else is `BadRequest` (an HTTP status and a message): the server
answers it with a JSON error and closes the connection, never with a 500.
"""

from __future__ import annotations

import re

MAX_LINE = 8190  # bytes of one request or header line (aiohttp's and nginx's bound)
MAX_HEAD = 64 * 1024  # bytes of a whole head (431 beyond)
MAX_HEADERS = 100

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_VERSIONS = {b"HTTP/1.1": (1, 1), b"HTTP/1.0": (1, 0)}
_ANY_VERSION = re.compile(rb"HTTP/[0-9]\.[0-9]")
_VISIBLE = re.compile(rb"[\x21-\x7e]+")


class BadRequest(Exception):
    """A request the gateway refuses to read: `status` (400, 431, 501, 505) and why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Headers(dict):
    """Request headers by lower-case name (the first of repeated ones); `get` takes any case."""

    def get(self, name: str, default=None):  # type: ignore[override]
        return dict.get(self, name.lower(), default)


def parse_head(head: bytes) -> tuple[str, str, tuple[int, int], Headers]:
    """(method, target, version, headers) of a request head (without its blank line)."""
    if b"\0" in head or head.count(b"\n") != head.count(b"\r\n"):
        raise BadRequest(400, "the request head has a NUL or a bare LF")
    lines = head.split(b"\r\n")
    if len(lines) > MAX_HEADERS + 1:
        raise BadRequest(431, f"more than {MAX_HEADERS} headers")
    first = lines[0]
    if len(first) > MAX_LINE:
        raise BadRequest(400, f"the request line exceeds {MAX_LINE} bytes")
    parts = first.split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise BadRequest(400, "the request line is not `METHOD TARGET HTTP/1.1`")
    version = _VERSIONS.get(parts[2])
    if version is None:
        if _ANY_VERSION.fullmatch(parts[2]):
            raise BadRequest(505, "only HTTP/1.0 and HTTP/1.1 are served")
        raise BadRequest(400, "the request line is not `METHOD TARGET HTTP/1.1`")
    headers = Headers()
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise BadRequest(400, "a header line is not `Name: value`")
        if len(line) > MAX_LINE:
            raise BadRequest(400, f"a header line exceeds {MAX_LINE} bytes")
        key = name.decode("ascii").lower()
        text = value.strip(b" \t").decode("latin-1")
        if key in headers:
            if key in ("content-length", "transfer-encoding", "host") and headers[key] != text:
                raise BadRequest(400, f"conflicting {key} headers")
            continue
        headers[key] = text
    return parts[0].decode("ascii"), _path(parts[1]), version, headers


def _path(target: bytes) -> str:
    """The path of a request target (origin or absolute form), without its query."""
    if target[:1] != b"/":
        if target[:7].lower() == b"http://" or target[:8].lower() == b"https://":
            at = target.find(b"/", target.find(b"//") + 2)
            target = target[at:] if at >= 0 else b"/"
        elif target != b"*":
            raise BadRequest(400, "the request target is not a path")
    if not _VISIBLE.fullmatch(target):
        raise BadRequest(400, "the request target has a character outside visible ASCII")
    return target.split(b"?", 1)[0].split(b"#", 1)[0].decode("ascii")


def body_length(headers: Headers) -> int | None:
    """The body's length by Content-Length (0 with neither header); None: chunked."""
    te = dict.get(headers, "transfer-encoding")
    cl = dict.get(headers, "content-length")
    if te is not None:
        if cl is not None:
            raise BadRequest(400, "both Transfer-Encoding and Content-Length")
        if te.lower() != "chunked":
            raise BadRequest(501, f"Transfer-Encoding {te[:40]!r} is not supported (only chunked)")
        return None
    if cl is None:
        return 0
    if not (cl.isascii() and cl.isdigit()) or len(cl) > 18:
        raise BadRequest(400, "Content-Length is not a number")
    return int(cl)


class Chunked:
    """Decodes a chunked body as its bytes arrive: `feed` returns (data, rest), `rest` being
    what follows the body (a pipelined request); `done` once the last chunk and trailers
    are in. Malformed framing raises BadRequest."""

    __slots__ = ("_buf", "_left", "_state", "done")

    def __init__(self) -> None:
        self._buf = b""
        self._left = 0  # data bytes of the current chunk still to come
        self._state = "size"  # size | data | crlf | trailer
        self.done = False

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        buf, out = self._buf + data, []
        while buf and not self.done:
            if self._state == "data":
                take = buf[: self._left]
                out.append(take)
                buf, self._left = buf[len(take) :], self._left - len(take)
                if not self._left:
                    self._state = "crlf"
                continue
            end = buf.find(b"\r\n")
            if end < 0:
                if len(buf) > MAX_LINE:
                    raise BadRequest(400, "a chunk-size or trailer line is too long")
                break
            line, buf = buf[:end], buf[end + 2 :]
            self._line(line)
        self._buf = b"" if self.done else buf
        return b"".join(out), (buf if self.done else b"")

    def _line(self, line: bytes) -> None:
        if self._state == "crlf":
            if line:
                raise BadRequest(400, "a chunk's data is longer than its size")
            self._state = "size"
        elif self._state == "size":
            size = line.split(b";", 1)[0].rstrip(b" \t")
            if not _HEX.fullmatch(size):
                raise BadRequest(400, "a chunk size is not a hexadecimal number")
            self._left = int(size, 16)
            self._state = "data" if self._left else "trailer"
        elif not line:  # the blank line after the trailers
            self.done = True
