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

_TCHARS = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TOKEN = re.compile(_TCHARS)
# header lines, each after its CRLF: a token, a colon, a value without controls but tab
_FIELDS_OK = re.compile(rf"(?:\r\n{_TCHARS}:[^\x00-\x08\x0a-\x1f\x7f]{{0,{MAX_LINE}}})*")
_FIELD = re.compile(r"\r\n([^:]*):[ \t]*([^\r]*)")  # (name, value + trailing blanks)
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_VERSIONS = {"HTTP/1.1": (1, 1), "HTTP/1.0": (1, 0)}
_ANY_VERSION = re.compile(r"HTTP/[0-9]\.[0-9]")
_VISIBLE = re.compile(r"[\x21-\x7e]+")


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
    """(method, path, version, headers) of a request head (without its blank line). One
    regular expression checks the header lines and one splits them (C, not a loop in
    Python: this runs once per request); lines it refuses are read again to say why."""
    text = head.decode("latin-1")
    if "\0" in text or text.count("\n") != text.count("\r\n"):
        raise BadRequest(400, "the request head has a NUL or a bare LF")
    end = text.find("\r\n")
    first, fields = (text, "") if end < 0 else (text[:end], text[end:])
    if len(first) > MAX_LINE:
        raise BadRequest(400, f"the request line exceeds {MAX_LINE} bytes")
    parts = first.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise BadRequest(400, "the request line is not `METHOD TARGET HTTP/1.1`")
    version = _VERSIONS.get(parts[2])
    if version is None:
        if _ANY_VERSION.fullmatch(parts[2]):
            raise BadRequest(505, "only HTTP/1.0 and HTTP/1.1 are served")
        raise BadRequest(400, "the request line is not `METHOD TARGET HTTP/1.1`")
    if not _FIELDS_OK.fullmatch(fields):
        _refuse_fields(fields)
    pairs = _FIELD.findall(fields)
    if len(pairs) > MAX_HEADERS:
        raise BadRequest(431, f"more than {MAX_HEADERS} headers")
    headers = Headers({name.lower(): value.rstrip(" \t") for name, value in pairs})
    if len(headers) < len(pairs):  # repeated names: the first counts, unless they conflict
        headers = _first_of(pairs)
    return parts[0], _path(parts[1]), version, headers


def _first_of(pairs: list[tuple[str, str]]) -> Headers:
    headers = Headers()
    for name, raw in pairs:
        key, value = name.lower(), raw.rstrip(" \t")
        if key not in headers:
            headers[key] = value
        elif key in ("content-length", "transfer-encoding", "host") and headers[key] != value:
            raise BadRequest(400, f"conflicting {key} headers")
    return headers


def _refuse_fields(fields: str) -> None:
    """Raise the BadRequest that says what is wrong with header lines _FIELDS_OK refused."""
    for line in fields.split("\r\n")[1:]:
        name, colon, _ = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise BadRequest(400, "a header line is not `Name: value`")
        if len(line) > MAX_LINE:
            raise BadRequest(400, f"a header line exceeds {MAX_LINE} bytes")
    raise BadRequest(400, "a header value has a control character")


def _path(target: str) -> str:
    """The path of a request target (origin or absolute form), without its query."""
    if not _VISIBLE.fullmatch(target):
        raise BadRequest(400, "the request target has a character outside visible ASCII")
    if target[:1] != "/":
        if target[:7].lower() == "http://" or target[:8].lower() == "https://":
            at = target.find("/", target.find("//") + 2)
            target = target[at:] if at >= 0 else "/"
        elif target != "*":
            raise BadRequest(400, "the request target is not a path")
    return target.split("?", 1)[0].split("#", 1)[0]


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
