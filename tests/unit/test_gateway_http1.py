"""The lean HTTP/1.1 client of non-streamed proxied requests (http1.py) against raw loopback
servers that answer as uvicorn may: chunked, `Connection: close`, idle connections closed."""

from __future__ import annotations

import asyncio

import pytest

from planner.adjuster.gateway.http1 import Http1, UpstreamError, render_head

HEAD = render_head("127.0.0.1", 1, "/v1/completions", (("Authorization", "Bearer s"),))


async def _server(answers: list[bytes], close_after: bool = False):
    """A server that reads one request per answer and writes it; (server, port, requests)."""
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while answers:
            head = await reader.readuntil(b"\r\n\r\n")
            n = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            got.append(head + await reader.readexactly(n))
            writer.write(answers.pop(0))
            await writer.drain()
            if close_after:  # as uvicorn after its keep-alive timeout
                break
        writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, srv.sockets[0].getsockname()[1], got


def test_a_chunked_answer_is_read_whole_and_the_request_carries_the_engine_key():
    async def main():
        answer = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b'Transfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n3;x=1\r\n:1}\r\n0\r\nT: v\r\n\r\n'
        )
        srv, port, got = await _server([answer])
        async with srv:
            http = Http1()
            status, ctype, body = await http.post("127.0.0.1", port, HEAD, b'{"m":1}')
            http.close()
        return status, ctype, body, got

    status, ctype, body, got = asyncio.run(main())
    assert (status, ctype, body) == (200, "application/json", b'{"a":1}')
    assert b"Authorization: Bearer s\r\n" in got[0] and got[0].endswith(b'\r\n\r\n{"m":1}')


def test_a_connection_the_engine_closed_while_idle_is_not_a_failure():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    async def main():
        srv, port, got = await _server([ok, ok], close_after=True)
        async with srv:
            http = Http1()
            first = await http.post("127.0.0.1", port, HEAD, b"{}")
            await asyncio.sleep(0.2)  # the server closed the kept-alive connection
            second = await http.post("127.0.0.1", port, HEAD, b"{}")
            http.close()
        return first, second, len(got)

    first, second, n = asyncio.run(main())
    assert first == second == (200, "application/json", b"ok") and n == 2


def test_connection_close_is_honoured_and_a_refused_port_is_a_connection_error():
    async def main():
        close = b"HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx"
        srv, port, _ = await _server([close])
        async with srv:
            http = Http1()
            got = await http.post("127.0.0.1", port, HEAD, b"{}")
            kept = sum(len(v) for v in http._idle.values())
        srv.close()
        await srv.wait_closed()
        with pytest.raises(UpstreamError):
            await http.post("127.0.0.1", port, HEAD, b"{}")
        return got, kept

    got, kept = asyncio.run(main())
    assert got[0] == 503 and kept == 0
    assert issubclass(UpstreamError, ConnectionError)  # forward.py: "no answer"


def test_a_204_ends_with_its_head_and_an_answer_without_length_with_the_connection():
    """Issue 43: 204 and 304 answers waited until the engine closed the connection."""

    async def main():
        no_content = b"HTTP/1.1 204 No Content\r\n\r\n"
        srv, port, _ = await _server([no_content, no_content])  # kept open after each
        async with srv:
            http = Http1()
            first = await asyncio.wait_for(http.post("127.0.0.1", port, HEAD, b"{}"), 5)
            second = await asyncio.wait_for(http.post("127.0.0.1", port, HEAD, b"{}"), 5)
            reused = sum(len(v) for v in http._idle.values())
            http.close()
        until_close = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"
        srv, port, _ = await _server([until_close])
        async with srv:
            http = Http1()
            third = await asyncio.wait_for(http.post("127.0.0.1", port, HEAD, b"{}"), 5)
            http.close()
        return first, second, reused, third

    first, second, reused, third = asyncio.run(main())
    assert first == second == (204, "application/json", b"") and reused == 1
    assert third == (200, "application/json", b"all of it")
