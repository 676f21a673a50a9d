"""The gateway's server against its parser library, byte for byte: the same request bytes go
to the gateway's HTTP server (h1server.py, in process, over loopback, a handler that echoes
what it got) and to `httptools` (llhttp) directly, and their verdicts must agree: every
request llhttp reads whole is answered 200 with the same method, body and path (the target's
path as the gateway routes it), and where llhttp refuses, the gateway answers the requests
before it and then a 4xx/5xx, never a 200. The cases: the smuggling and framing cases that
issue 43 found the old parser lax on, the classic CL.TE / TE.CL / TE.TE desyncs, and more.

Documented exceptions (`STRICTER`): heads llhttp reads and the gateway refuses on purpose
(h1server.py's docstring, docs/security.md "HTTP parsing"). Each is checked to be still
accepted by llhttp, so that the list stays true; the gateway never accepts what llhttp
refuses (there is no exception that way).
"""

from __future__ import annotations

import asyncio
import json
import logging

import httptools
import pytest

from planner.adjuster.gateway.guard import Guard
from planner.adjuster.gateway.h1body import BadRequest
from planner.adjuster.gateway.h1server import MAX_CHUNKS, Request, Server, target_path
from planner.adjuster.gateway.reply import Response, error, json_response

H = b"Host: h\r\n"
CHUNKED = b"POST /v1/completions HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
NEXT = b"GET /next HTTP/1.1\r\n" + H + b"\r\n"  # a request smuggled behind the first

CASES = {
    # issue 43's list
    "bare LF in a chunk extension": CHUNKED + b"1;a\nb\r\nx\r\n0\r\n\r\n",
    "NUL in a chunk extension": CHUNKED + b"1;a\x00b\r\nx\r\n0\r\n\r\n",
    "bare LF in a trailer": CHUNKED + b"1\r\nx\r\n0\r\nT: a\n\r\n",
    "NUL in a trailer": CHUNKED + b"1\r\nx\r\n0\r\nT: a\x00\r\n\r\n",
    "two Transfer-Encoding: chunked": b"POST /v1/completions HTTP/1.1\r\n"
    + H
    + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "absolute target with ? before the path": b"GET http://h?/v1/completions HTTP/1.1\r\n"
    + H
    + b"\r\n",
    "absolute target with # before the path": b"GET http://h#/v1/completions HTTP/1.1\r\n"
    + H
    + b"\r\n",
    "HTTP/1.1 without Host": b"GET /v1/models HTTP/1.1\r\n\r\n",
    "a chunk size with a trailing space": CHUNKED + b"1 \r\nx\r\n0\r\n\r\n",
    "two identical Content-Length": b"POST /v1/completions HTTP/1.1\r\n"
    + H
    + b"Content-Length: 1\r\nContent-Length: 1\r\n\r\nx",
    # request smuggling: CL.TE, TE.CL, TE.TE
    "Content-Length and chunked (CL.TE)": b"POST /v1/completions HTTP/1.1\r\n"
    + H
    + b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX"
    + NEXT,
    "chunked then Content-Length (TE.CL)": b"POST /v1/completions HTTP/1.1\r\n"
    + H
    + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n",
    "Transfer-Encoding with a space before the colon": b"POST / HTTP/1.1\r\n"
    + H
    + b"Transfer-Encoding : chunked\r\nContent-Length: 3\r\n\r\nabc",
    "Transfer-Encoding: xchunked": b"POST / HTTP/1.1\r\n"
    + H
    + b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    "Transfer-Encoding: chunked, identity": b"POST / HTTP/1.1\r\n"
    + H
    + b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
    "Transfer-Encoding: gzip, chunked": b"POST / HTTP/1.1\r\n"
    + H
    + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    "Transfer-Encoding in an obsolete folded line": b"POST / HTTP/1.1\r\n"
    + H
    + b"X: y\r\n Transfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\nx",
    "two different Content-Length": b"POST / HTTP/1.1\r\n"
    + H
    + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
    "Content-Length with a plus": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: +1\r\n\r\nx",
    "negative Content-Length": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: -1\r\n\r\n",
    "Content-Length in hex": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 0x1\r\n\r\nx",
    "a chunk size that overflows 64 bits": CHUNKED + b"10000000000000001\r\nx\r\n0\r\n\r\n",
    "a chunk size with 0x": CHUNKED + b"0x1\r\nx\r\n0\r\n\r\n",
    "a chunk longer than its size": CHUNKED + b"1\r\nxy\r\n0\r\n\r\n",
    "a chunk without its CRLF": CHUNKED + b"1\r\nx0\r\n\r\n",
    "a bare LF ending the request line": b"GET / HTTP/1.1\n" + H + b"\r\n",
    "a bare LF ending a header": b"GET / HTTP/1.1\r\n" + H + b"A: b\n\r\n",
    "a bare CR in a header": b"GET / HTTP/1.1\r\n" + H + b"A: b\rc\r\n\r\n",
    "NUL in a header value": b"GET / HTTP/1.1\r\n" + H + b"A: b\x00c\r\n\r\n",
    "a control character in a header value": b"GET / HTTP/1.1\r\n" + H + b"A: \x01\r\n\r\n",
    "a space before a header colon": b"GET / HTTP/1.1\r\nHost : h\r\n\r\n",
    "a header line starting with a space": b"GET / HTTP/1.1\r\n A: b\r\n" + H + b"\r\n",
    "a non-ASCII byte in the target": b"GET /\x80 HTTP/1.1\r\n" + H + b"\r\n",
    "a lowercase method": b"get / HTTP/1.1\r\n" + H + b"\r\n",
    "an unknown method token": b"FROB / HTTP/1.1\r\n" + H + b"\r\n",
    "HTTP/2.0 in an HTTP/1 head": b"GET / HTTP/2.0\r\n" + H + b"\r\n",
    "HTTP/0.9": b"GET / HTTP/0.9\r\n" + H + b"\r\n",
    "HTTP/1.2": b"GET / HTTP/1.2\r\n" + H + b"\r\n",
    "two Host headers": b"GET / HTTP/1.1\r\n" + H + b"Host: evil\r\n\r\n",
    "an Upgrade to h2c": b"GET / HTTP/1.1\r\n" + H + b"Connection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
    "CONNECT": b"CONNECT h:443 HTTP/1.1\r\n" + H + b"\r\n",
    # what must be read, and read the same
    "chunked with extensions and a trailer, then a pipelined request": CHUNKED
    + b"3;e=1\r\nabc\r\n2;f\r\nde\r\n0\r\nT: a\r\n\r\n"
    + NEXT,
    "Content-Length, then a pipelined request": b"POST /v1/completions HTTP/1.1\r\n"
    + H
    + b"Content-Length: 5\r\n\r\nhello"
    + NEXT,
    "HTTP/1.0 without Host": b"GET /v1/models HTTP/1.0\r\n\r\n",
    "empty lines before the request line": b"\r\n\r\nGET /v1/models HTTP/1.1\r\n" + H + b"\r\n",
    "absolute-form target": b"GET http://h:8000/v1/models?x=1 HTTP/1.1\r\n" + H + b"\r\n",
    "query and fragment stripped": b"GET /v1/models?a=/b#c HTTP/1.1\r\n" + H + b"\r\n",
    "OPTIONS *": b"OPTIONS * HTTP/1.1\r\n" + H + b"\r\n",
    "upper-case chunked and hex sizes": b"POST / HTTP/1.1\r\n"
    + H
    + b"Transfer-Encoding: CHUNKED\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
    "Expect: 100-continue with its body": b"POST / HTTP/1.1\r\n"
    + H
    + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
    "too many chunks": CHUNKED + b"1\r\nx\r\n" * (MAX_CHUNKS + 1) + b"0\r\n\r\n",
    "a long chunk extension": CHUNKED + b"1;" + b"e" * 6000 + b"\r\nx\r\n0\r\n\r\n",
    "101 header fields": b"GET / HTTP/1.1\r\n" + H + b"A: b\r\n" * 100 + b"\r\n",
    "a header field over 8190 bytes": b"GET / HTTP/1.1\r\n"
    + H
    + b"A: "
    + b"b" * 8200
    + b"\r\n\r\n",
    "long trailers": CHUNKED + b"1\r\nx\r\n0\r\n" + b"T: " + b"t" * 6000 + b"\r\n\r\n",
}

# llhttp reads these; the gateway refuses them on purpose, with this status
STRICTER = {
    "HTTP/1.1 without Host": 400,  # RFC 9112 3.2: a server MUST answer 400
    "two Host headers": 400,  # the same RFC
    "Transfer-Encoding: gzip, chunked": 501,  # the gateway decodes no content coding
    "HTTP/2.0 in an HTTP/1 head": 505,
    "HTTP/0.9": 505,
    "an Upgrade to h2c": 400,  # nothing is served but HTTP/1.1
    "CONNECT": 400,
    "too many chunks": 413,  # h1server.MAX_CHUNKS
    "a long chunk extension": 400,  # h1server.FRAMING_BYTES: llhttp reads any length
    "long trailers": 400,
    "101 header fields": 431,  # h1server.MAX_HEADERS
    "a header field over 8190 bytes": 431,  # h1server.MAX_LINE
}


class _Llhttp:
    """What httptools makes of bytes: the requests it read whole, then its error, if any."""

    def __init__(self, raw: bytes):
        self.done: list[tuple[str, bytes, bytes]] = []  # method, url, body
        self._url, self._body = b"", []
        self.parser = httptools.HttpRequestParser(self)
        try:
            self.parser.feed_data(raw)
            self.error = None
        except httptools.HttpParserUpgrade:
            self.error = None  # (CONNECT, Upgrade: the head was read whole)
        except httptools.HttpParserError as e:
            self.error = str(e) or type(e).__name__

    def on_message_begin(self) -> None:
        self._url, self._body = b"", []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_body(self, data: bytes) -> None:
        self._body.append(data)

    def on_message_complete(self) -> None:
        self.done.append((self.parser.get_method().decode(), self._url, b"".join(self._body)))


async def _echo(request: Request) -> Response:
    body = b""
    try:
        while chunk := await request.body.read(65536):
            body += chunk
    except BadRequest as e:
        return error(e.status, str(e), "BadRequestError")
    got = {"method": request.method, "path": request.path, "body": body.decode("latin-1")}
    return json_response(got)


async def _gateway(raws: list[bytes]) -> list[list[tuple[int, dict]]]:
    """Each raw request's answers from the gateway's server: (status, JSON body) in order."""
    server = Server(_echo, Guard(cap=64, header_timeout_s=60), logging.getLogger("t.h1"))
    listener = await asyncio.get_running_loop().create_server(server, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    out = []
    try:
        for raw in raws:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            writer.write_eof()
            got = await asyncio.wait_for(reader.read(), 20)
            writer.close()
            out.append(_answers(got))
    finally:
        listener.close()
        await server.shutdown(5)
    return out


def _answers(raw: bytes) -> list[tuple[int, dict]]:
    out = []
    while raw:
        head, _, raw = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        if lines[0] == "HTTP/1.1 100 Continue":
            continue
        fields = dict(line.lower().split(": ", 1) for line in lines[1:])
        n = int(fields["content-length"])
        out.append((int(lines[0].split()[1]), json.loads(raw[:n])))
        raw = raw[n:]
    return out


@pytest.fixture(scope="module")
def verdicts() -> dict[str, tuple[_Llhttp, list[tuple[int, dict]]]]:
    names = list(CASES)
    gw = asyncio.run(_gateway([CASES[n] for n in names]))
    return {n: (_Llhttp(CASES[n]), g) for n, g in zip(names, gw, strict=True)}


@pytest.mark.parametrize("name", list(CASES))
def test_the_gateway_and_llhttp_agree_on_every_case(name, verdicts):
    ll, gw = verdicts[name]
    if name in STRICTER:  # a documented exception: llhttp reads it, the gateway refuses it
        assert ll.error is None and ll.done, "llhttp refuses it now: drop it from STRICTER"
        assert [s for s, _ in gw] == [STRICTER[name]], gw
        return
    oks = [(s, b) for s, b in gw if s == 200]
    assert len(oks) == len(ll.done), (gw, ll.done, ll.error)
    for (_, got), (method, url, body) in zip(oks, ll.done, strict=True):
        assert got == {
            "method": method,
            "path": target_path(url.decode("latin-1")),
            "body": body.decode("latin-1"),
        }
    if ll.error is None:
        assert len(gw) == len(ll.done)  # nothing refused
    else:  # refused where llhttp stopped: after the requests it read whole, one 4xx/5xx
        assert len(gw) == len(ll.done) + 1 and 400 <= gw[-1][0] < 600, (gw, ll.error)
        assert gw[-1][1]["error"]["message"]


def test_a_target_whose_authority_ends_at_a_query_routes_to_the_root():
    assert target_path("http://h?/v1/completions") == "/"
    assert target_path("http://h#/v1/completions") == "/"
    assert target_path("https://h:1/v1/models?x") == "/v1/models"
