"""The gateway's own HTTP/1.1 server (h1server.py, parsing by httptools): anything
malformed is a 4xx/5xx JSON answer (never a 500 or a traceback), pipelining, chunked bodies,
HTTP/1.0, a failing handler, a client that leaves. What the parser accepts against the
gateway's verdicts: test_gateway_h1_differential.py. The server runs in-process over loopback with a small handler; the gateway's routes
over it: test_gateway*.py."""

from __future__ import annotations

import asyncio
import json
import logging

from hypothesis import given, settings
from hypothesis import strategies as st
from waits import until_async

from planner.adjuster.gateway.guard import Guard
from planner.adjuster.gateway.h1server import Request, Server
from planner.adjuster.gateway.reply import Response, StreamResponse, json_response

STATUSES = {400, 413, 417, 431, 501, 505}  # what the server answers a request it cannot read


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
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nxyz"
            b"POST /b?q=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n4;e=1\r\ndefg\r\n0\r\n\r\n"
            b"HEAD /c HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
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
        for b in b"\r\nPOST /drip HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok":
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
    head = b"POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"

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
        close = b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        got = await _exchange(port, close, False)
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
        got = await _exchange(port, b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n", shut=False)
        ((status, fields, body),) = _answers(got)
        assert status == 500 and json.loads(body)["error"]["type"] == "InternalServerError"
        assert fields["connection"] == "close"

    asyncio.run(_serve(test))
    assert any("a bug" in r.getMessage() for r in caplog.records)


def test_a_client_that_leaves_cancels_its_handler():
    async def test(port: int, server: Server) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        await until_async(
            lambda: [c.task is not None for c in server.guard.open] == [True], "the handler"
        )
        (conn,) = server.guard.open
        task = conn.task
        assert task is not None and not task.done()
        writer.transport.abort()
        await until_async(lambda: task.done() and not server.guard.open, "the cancel")
        assert task.done() and not server.guard.open

    asyncio.run(_serve(test))


def test_an_answer_before_the_body_is_read_lingers_then_closes():
    async def test(port: int, _: Server) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /boom HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
        got = await asyncio.wait_for(reader.read(), 10)  # our side ended after the answer
        assert got.startswith(b"HTTP/1.1 500 ") and b"Connection: close" in got
        writer.write(b"x" * 1000)  # still read (and dropped): no reset
        await writer.drain()
        writer.close()

    asyncio.run(_serve(test))


class _GoneTransport(asyncio.Transport):
    """A transport whose peer has gone: shutting down its side raises ENOTCONN, as a real
    socket does when the reset lands between the answer and the close (a fake: the race
    cannot be arranged with a real socket)."""

    def __init__(self):
        super().__init__()
        self.aborted = False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data):
        pass

    def can_write_eof(self):
        return True

    def write_eof(self):
        raise OSError(107, "Transport endpoint is not connected")

    def is_closing(self):
        return self.aborted

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def abort(self):
        self.aborted = True


def test_a_peer_gone_before_the_lingering_close_is_no_task_error(caplog):
    """Issue 43: one unhandled "Errno 107" task error during a flood."""

    async def run() -> None:
        server = Server(_handler, Guard(cap=8, header_timeout_s=60), logging.getLogger("t"))
        conn = server()
        transport = _GoneTransport()
        conn.connection_made(transport)
        conn.data_received(b"POST /boom HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
        await asyncio.sleep(0.05)  # the handler fails: a 500, then the lingering close
        assert transport.aborted and conn.task is None

    caplog.set_level(logging.ERROR)
    asyncio.run(run())
    assert not [r for r in caplog.records if "107" in r.getMessage()]


class _DenyGate:
    """Refuses /deny on its head; counts what it admitted and released."""

    def __init__(self):
        self.admitted = self.released = 0

    def admit(self, request: Request) -> Response | None:
        if request.path == "/bug":
            raise RuntimeError("a bug in the gate")
        if request.path == "/deny":
            return json_response({"denied": True}, 403)
        self.admitted += 1
        return None

    def release(self, request: Request) -> None:
        self.released += 1


def test_a_gate_refusal_in_a_pipeline_is_answered_in_order_and_its_body_never_read():
    gate = _DenyGate()

    async def main() -> bytes:
        server = Server(_handler, Guard(cap=8, header_timeout_s=60), logging.getLogger("t"), gate)
        listener = await asyncio.get_running_loop().create_server(server, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        try:
            return await _exchange(
                port,
                (
                    b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nxyz"
                    b"POST /deny HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"zz\r\nnot even chunks"
                    b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n"
                ),
            )
        finally:
            listener.close()
            await server.shutdown(5)

    got = _answers(asyncio.run(main()))
    assert [s for s, _, _ in got] == [200, 403]  # /c never read: parsing stopped at /deny
    assert got[1][1]["connection"] == "close" and json.loads(got[0][2])["body"] == "xyz"
    assert gate.admitted == gate.released == 1


def test_a_gate_that_fails_is_a_logged_json_500_not_a_400(caplog):
    async def main() -> bytes:
        server = Server(
            _handler, Guard(cap=8, header_timeout_s=60), logging.getLogger("t"), _DenyGate()
        )
        listener = await asyncio.get_running_loop().create_server(server, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        try:
            return await _exchange(port, b"GET /bug HTTP/1.1\r\nHost: x\r\n\r\n")
        finally:
            listener.close()
            await server.shutdown(5)

    ((status, _, body),) = _answers(asyncio.run(main()))
    assert status == 500 and json.loads(body)["error"]["type"] == "InternalServerError"
    assert "a bug in the gate" in caplog.text
