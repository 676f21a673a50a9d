"""The gateway's own HTTP/1.1 server (h1server.py) and its parser (h1parse.py): heads and
chunked bodies round-trip, anything malformed is a 4xx/5xx JSON answer from the parser's
set (never a 500 or a traceback), pipelining, HTTP/1.0, a failing handler, a client that
leaves. The server runs in-process over loopback with a small handler; the gateway's routes
over it: test_gateway*.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.adjuster.gateway.guard import Guard
from planner.adjuster.gateway.h1parse import BadRequest, Chunked, body_length, parse_head
from planner.adjuster.gateway.h1server import Request, Server
from planner.adjuster.gateway.reply import Response, StreamResponse, json_response

TCHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
token = st.text(TCHARS, min_size=1, max_size=20)
visible = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=30)
value = st.builds(
    lambda a, b: (a + b).strip(" \t"),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
            max_size=40),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=5),
)  # fmt: skip
STATUSES = {400, 417, 431, 501, 505}  # what the server answers a request it cannot read


@settings(max_examples=300, deadline=None)
@given(
    method=token,
    path=visible.filter(lambda p: "?" not in p and "#" not in p),
    query=st.one_of(st.just(""), visible.map(lambda q: "?" + q)),
    version=st.sampled_from(["HTTP/1.0", "HTTP/1.1"]),
    fields=st.dictionaries(token.map(str.lower), value, max_size=12),
    blanks=st.sampled_from(["", " ", "  ", "\t"]),
)
def test_a_head_round_trips(method, path, query, version, fields, blanks):
    lines = [f"{method} /{path}{query} {version}"]
    lines += [f"{k.title()}:{blanks}{v}{blanks}" for k, v in fields.items()]
    got = parse_head("\r\n".join(lines).encode("latin-1"))
    assert got == (method, "/" + path, (1, int(version[-1])), fields)
    assert got[3].get("X-Nope") is None and all(
        got[3].get(k.upper()) == v for k, v in fields.items()
    )


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_parse_or_are_refused_with_a_status(raw):
    try:
        _, path, version, headers = parse_head(raw)
    except BadRequest as e:
        assert e.status in STATUSES and str(e)
        return
    assert path.startswith("/") or path == "*"
    assert version in ((1, 0), (1, 1)) and all(k == k.lower() for k in headers)


GOOD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nX-User: ann"


@settings(max_examples=500, deadline=None)
@given(st.integers(0, len(GOOD)), st.binary(min_size=1, max_size=3), st.integers(0, 3))
def test_a_damaged_head_is_parsed_or_refused_never_an_error(at, junk, cut):
    raw = GOOD[:at] + junk + GOOD[at + cut :]
    try:
        _, _, _, headers = parse_head(raw)
        body_length(headers)
    except BadRequest as e:
        assert e.status in STATUSES


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET / HTTP/1.1\r\nA : b", 400),  # a blank before the colon
        (b"GET / HTTP/1.1\r\n folded: x", 400),  # obsolete line folding
        (b"GET / HTTP/1.1\r\nA: b\nC: d", 400),  # a bare LF
        (b"GET / HTTP/1.1\r\nA: b\rc", 400),  # a bare CR
        (b"GET / HTTP/2.0", 505),
        (b"GET /\x80 HTTP/1.1", 400),
        (b"GET / HTTP/1.1\r\nX: " + b"y" * 9000, 400),
        (b"GET / HTTP/1.1" + b"\r\nA: b" * 101, 431),
        (b"POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 2", 400),
    ],
)
def test_malformed_heads_get_their_status(raw, status):
    with pytest.raises(BadRequest) as e:
        parse_head(raw)
    assert e.value.status == status


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({}, 0),
        ({"content-length": "12"}, 12),
        ({"transfer-encoding": "Chunked"}, None),
        ({"content-length": "-1"}, 400),
        ({"content-length": "1e3"}, 400),
        ({"content-length": "²"}, 400),  # a digit to str.isdigit, not to HTTP
        ({"transfer-encoding": "gzip, chunked"}, 501),
        ({"transfer-encoding": "chunked", "content-length": "3"}, 400),
    ],
)
def test_the_body_length_is_read_strictly(fields, want):
    _, _, _, headers = parse_head(
        b"POST / HTTP/1.1" + b"".join(f"\r\n{k}: {v}".encode("latin-1") for k, v in fields.items())
    )
    if want is None or want < 100:
        assert body_length(headers) == want
    else:
        with pytest.raises(BadRequest) as e:
            body_length(headers)
        assert e.value.status == want


def _chunked(parts: list[bytes], ext: bool) -> bytes:
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(p), b";x=1" if ext else b"", p) for p in parts if p)
    return out + b"0\r\nTrailer: t\r\n\r\n"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=50), max_size=8),
    st.booleans(),
    st.lists(st.integers(1, 40), min_size=1, max_size=20),
    st.binary(max_size=10),
)
def test_a_chunked_body_decodes_whatever_the_reads(parts, ext, sizes, after):
    wire, dec, got, rest = _chunked(parts, ext) + after, Chunked(), b"", b""
    at = 0
    for n in itertools.cycle(sizes):  # reads of these sizes, in turn
        if at >= len(wire) or dec.done:
            break
        data, rest = dec.feed(wire[at : at + n])
        got, at = got + data, at + n
    assert dec.done and got == b"".join(parts)
    assert rest + wire[at:] == after


@pytest.mark.parametrize(
    "wire", [b"zz\r\n", b"3\r\nabcd\r\n", b"-1\r\n", b"0x3\r\nabc\r\n", b"1" * 9000]
)
def test_malformed_chunks_are_bad_requests(wire):
    with pytest.raises(BadRequest):
        Chunked().feed(wire)


# ----- the server, in-process


async def _handler(request: Request) -> Response | StreamResponse:
    if request.path == "/boom":
        raise RuntimeError("a bug")
    if request.path == "/stream":
        resp = StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for word in (b"a", b"", b"bc"):
            await resp.write(word)
        return resp
    if request.path == "/slow":
        await asyncio.sleep(60)
    body = b""
    while chunk := await request.body.read(7):
        body += chunk
    return json_response({"path": request.path, "body": body.decode(), "method": request.method})


async def _serve(test) -> None:
    guard = Guard(cap=64, header_timeout_s=60)
    server = Server(_handler, guard, logging.getLogger("planner.gateway.http"))
    listener = await asyncio.get_running_loop().create_server(server, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        await test(port, server)
    finally:
        listener.close()
        await server.shutdown(5)


async def _exchange(port: int, raw: bytes, shut: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    if shut:
        writer.write_eof()
    got = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return got


def _answers(raw: bytes) -> list[tuple[int, dict, bytes]]:
    """The (status, headers, body) of each whole Content-Length answer in `raw`."""
    out = []
    while raw:
        head, _, raw = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = dict(line.lower().split(": ", 1) for line in lines[1:])
        n = int(fields["content-length"])
        out.append((int(lines[0].split()[1]), fields, raw[:n]))
        raw = raw[n:]
    return out


def test_pipelined_requests_chunked_bodies_and_head_are_answered_in_order():
    async def test(port: int, _: Server) -> None:
        raw = (
            b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz"
            b"POST /b?q=1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n4;e=1\r\ndefg\r\n0\r\n\r\n"
            b"HEAD /c HTTP/1.1\r\n\r\n"
            b"GET /d HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        got = await _exchange(port, raw, shut=False)
        *first, last = got.split(b"HTTP/1.1 ")[1:]
        whole = _answers(b"".join(b"HTTP/1.1 " + a for a in first[:2]))
        assert [json.loads(b) for _, _, b in whole] == [
            {"path": "/a", "body": "xyz", "method": "POST"},
            {"path": "/b", "body": "abcdefg", "method": "POST"},
        ]
        assert first[2].endswith(b"\r\n\r\n") and b"Content-Length: " in first[2]  # HEAD
        assert b"Connection: close" in last and b'"path": "/d"' in last

    asyncio.run(_serve(test))


def test_a_head_sent_a_byte_at_a_time_is_read():
    async def test(port: int, _: Server) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for b in b"\r\nPOST /drip HTTP/1.1\r\nContent-Length: 2\r\n\r\nok":
            writer.write(bytes([b]))
            await writer.drain()
            await asyncio.sleep(0.001)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        n = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert head.startswith(b"HTTP/1.1 200 ")
        assert json.loads(await reader.readexactly(n))["body"] == "ok"
        writer.close()

    asyncio.run(_serve(test))


def test_100_continue_is_sent_only_to_a_client_that_waits_for_it():
    head = b"POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"

    async def test(port: int, _: Server) -> None:
        close = head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
        got = await _exchange(port, close + b"ok", shut=False)  # no wait: no 100
        assert got.startswith(b"HTTP/1.1 200 ") and b"100 Continue" not in got
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head)
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"ok")
        final = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert final.startswith(b"HTTP/1.1 200 ")
        writer.close()

    asyncio.run(_serve(test))


def test_http_1_0_closes_and_streams_end_with_the_connection():
    async def test(port: int, _: Server) -> None:
        got = await _exchange(port, b"GET /x HTTP/1.0\r\n\r\n", shut=False)
        assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" in got
        got = await _exchange(port, b"GET /stream HTTP/1.0\r\n\r\n", shut=False)
        assert got.endswith(b"\r\n\r\nabc") and b"chunked" not in got
        got = await _exchange(port, b"GET /stream HTTP/1.1\r\nConnection: close\r\n\r\n", False)
        assert got.endswith(b"\r\n\r\n1\r\na\r\n2\r\nbc\r\n0\r\n\r\n")  # no empty chunk

    asyncio.run(_serve(test))


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=1, max_size=200))
def test_garbage_gets_a_json_refusal_never_a_500(junk):
    async def test(port: int, _: Server) -> None:
        got = await _exchange(port, junk + b"\r\n\r\n")
        if not got:  # only CRLFs: no request was sent
            assert not junk.strip(b"\r\n")
            return
        status = int(got.split(b" ", 2)[1])
        if status in STATUSES:
            (_, fields, body) = _answers(got)[:1][0]
            assert fields["connection"] == "close"
            assert json.loads(body)["error"]["code"] == status
        else:  # a request after all (it parsed)
            assert status == 200

    asyncio.run(_serve(test))


def test_a_failing_handler_is_a_logged_json_500(caplog):
    caplog.set_level(logging.ERROR, logger="planner.gateway.http")

    async def test(port: int, _: Server) -> None:
        got = await _exchange(port, b"GET /boom HTTP/1.1\r\n\r\n", shut=False)
        ((status, fields, body),) = _answers(got)
        assert status == 500 and json.loads(body)["error"]["type"] == "InternalServerError"
        assert fields["connection"] == "close"

    asyncio.run(_serve(test))
    assert any("a bug" in r.getMessage() for r in caplog.records)


def test_a_client_that_leaves_cancels_its_handler():
    async def test(port: int, server: Server) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow HTTP/1.1\r\n\r\n")
        await asyncio.sleep(0.2)
        (conn,) = server.guard.open
        task = conn.task
        assert task is not None and not task.done()
        writer.transport.abort()
        await asyncio.sleep(0.2)
        assert task.done() and not server.guard.open

    asyncio.run(_serve(test))


def test_an_answer_before_the_body_is_read_lingers_then_closes():
    async def test(port: int, _: Server) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /boom HTTP/1.1\r\nContent-Length: 100000\r\n\r\nabc")
        got = await asyncio.wait_for(reader.read(), 10)  # our side ended after the answer
        assert got.startswith(b"HTTP/1.1 500 ") and b"Connection: close" in got
        writer.write(b"x" * 1000)  # still read (and dropped): no reset
        await writer.drain()
        writer.close()

    asyncio.run(_serve(test))
