"""The gateway's HTTP/1.1 server: one asyncio protocol per client connection, requests
parsed by `httptools` (llhttp, the parser Node.js and uvicorn use, in C).

Lean on purpose. On a machine the engines saturate, the gateway's CPU per proxied request is
throughput lost, and aiohttp's server (a request object with multidicts and a payload
stream, a response object, its writer, middleware hooks) cost about half of it. A request
here is its head from the parser's callbacks, its body fed to a `Body` as the parser
decodes it, and either the server's `fast` (the proxy's common case, answered from callbacks:
exchange.py) or one task running the handler; the answer is one write.

Nothing before the gate. When a head is whole the server's `Gate` runs at once, in the
parser's callback (the key check, the key's limits, the route: auth.py), then the body's
bytes are held against the `Budget` (h1body.py). A refused request is answered and, when it
has a body, the connection closes without reading a byte of it: parsing stops there.

What llhttp accepts, and what this server adds to it (docs/security.md, "HTTP parsing"):
llhttp runs strict (no leniency flags): CRLF line ends only (heads, chunk lines, trailers),
header names are tokens, no obsolete line folding, no whitespace before the colon or after
a chunk size, one Content-Length (a duplicate, even identical, is refused), never with
Transfer-Encoding, chunked last, only the registered methods (a lowercase `get` is a 400,
not a 405). On top: HTTP/1.0 and 1.1 only (505; llhttp takes 0.9 and 2.0 heads),
Transfer-Encoding exactly `chunked` (501 for `gzip, chunked`), `Host` required in HTTP/1.1
and never twice (400), no Upgrade or CONNECT (400), at most `MAX_HEAD` bytes, `MAX_HEADERS`
fields and `MAX_LINE` bytes a field in a head (431), at most `MAX_CHUNKS` chunks (413) and
`FRAMING_BYTES` + `FRAMING_PER_CHUNK` per chunk of size lines, extensions and trailers in a
body (400). Each is answered with a JSON error and a closed connection, never a 500.

Behaviour kept from the aiohttp server it replaces:
- keep-alive (HTTP/1.1, unless `Connection: close`), pipelined requests in order;
- bodies by Content-Length or chunked, read by the handler within its own bounds (body.py),
  reading paused while `h1body.PAUSE_BYTES` wait unread; `Expect: 100-continue` answered when
  the handler first waits for the body (417 for any other expectation);
- an answer given before the body was read whole closes the connection after a lingering
  close (the client sees the answer, not a reset);
- a client that leaves cancels its request's handler (the upstream request is closed);
- a handler that raises gets a JSON 500 and its error is logged (quietly: guard.QuietFilter);
- connections are admitted, capped and timed out by the Guard (guard.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

import httptools

from planner.adjuster.gateway.h1body import BadRequest, Body, Budget, OverBudget
from planner.adjuster.gateway.reply import Response, StreamResponse, error, render_head

if TYPE_CHECKING:
    from planner.adjuster.gateway.guard import Guard

__all__ = ["BadRequest", "Gate", "Headers", "Request", "Server"]

MAX_HEAD = 64 * 1024  # bytes of a request head (431 beyond)
MAX_HEADERS = 100
MAX_LINE = 8190  # bytes of one header field (aiohttp's and nginx's bound); 431 beyond
MAX_CHUNKS = 16384  # chunks of one body (a 16 MiB body in 1 KiB chunks); 413 beyond
FRAMING_BYTES = 4096  # a chunked body's bytes that are not data (size lines, extensions,
FRAMING_PER_CHUNK = 32  # trailers): at most this plus this per chunk; 400 beyond
FRAMING_SLICE = 1024  # a chunked body is parsed in slices of this, its framing counted
FAST_WAIT_S = 1.0  # a body that comes after its head is waited for this long with no task
LINGER_S = 5.0  # how long an unread body is read and dropped after the answer...
LINGER_BYTES = 256 * 1024  # ...and how much of it at most
RETRY_AFTER_S = 1  # of a 503 for lack of body budget
_KINDS = {
    413: "RequestEntityTooLargeError",
    431: "RequestHeaderFieldsTooLargeError",
    501: "NotImplementedError",
    505: "HTTPVersionNotSupportedError",
    503: "ServiceUnavailableError",
    500: "InternalServerError",
}


# Request headers by lower-case name (the first of repeated ones): ask for them in lower
# case (a dict subclass whose `get` lowered the name cost a call per read on the hot path).
Headers = dict[str, str]


class Request:
    """One request: its head, its body, who sent it (`caller`, set by the gate), the key
    slot it holds (`admitted`), whose body budget it uses (`owner`) and what it holds;
    whether the server's `fast` may take it (`fast`) and its callbacks' state if it did
    (`exchange`)."""

    __slots__ = (
        "admitted",
        "body",
        "caller",
        "conn",
        "exchange",
        "fast",
        "handler",
        "headers",
        "held",
        "keep_alive",
        "method",
        "owner",
        "path",
        "refusal",
        "released",
        "started",
        "target",
        "version",
    )

    def __init__(
        self,
        conn: Conn,
        method: str,
        path: str,
        version: tuple[int, int],
        headers: Headers,
        length: int | None,
    ):
        self.conn = conn
        self.method = method
        self.path = path
        self.version = version
        self.headers, self.body = headers, Body(conn, length)
        connection = headers.get("connection")
        self.keep_alive = version == (1, 1) and (
            connection is None or "close" not in connection.lower()
        )
        self.caller: Any = None
        self.admitted: str | None = None
        self.handler: Any = None  # the route's handler, when the gate chose one
        self.fast = False  # the gate lets `Server.fast` try it once its body is whole
        self.exchange: Any = None  # an Exchange (exchange.py) while `fast` runs it
        self.owner = ""  # the key name whose body budget this request uses
        self.held = 0  # body bytes taken from the budget
        self.refusal: Response | None = None  # the gate's answer instead of the handler's
        self.released = False
        self.started = False  # a streamed answer's head was sent
        self.target = path  # the request target as sent (with its query)


Answer = Response | StreamResponse
Handler = Callable[[Request], Awaitable[Answer]]


class Gate(Protocol):
    """What runs on a request's head before any byte of its body is read."""

    def admit(self, request: Request) -> Response | None:
        """None to run the handler; else the answer instead (the body is not read)."""
        ...

    def release(self, request: Request) -> None:
        """The request is over (answered, or its client left): give back what admit took."""
        ...


class OpenGate:
    """Admits every request."""

    def admit(self, request: Request) -> Response | None:
        return None

    def release(self, request: Request) -> None:
        return None


class Server:
    """The protocol factory for `loop.create_server`, and what its connections share."""

    def __init__(
        self,
        handler: Handler,
        guard: Guard,
        logger: logging.Logger,
        gate: Gate | None = None,
        budget: Budget | None = None,
        fast: Callable[[Request], bool] | None = None,
    ):
        self.handler = handler
        self.guard = guard
        self.log = logger
        self.gate = gate if gate is not None else OpenGate()
        self.budget = budget
        # Takes a request the gate marked `fast` whose body is whole, and answers it from
        # callbacks (`Conn.respond`, or `Conn.run` to go on as a task); False: the handler
        # runs it as a task.
        self.fast = fast
        self.stopping = False  # no new request on a kept-alive connection

    def __call__(self) -> Conn:
        return Conn(self)

    def admit(self, req: Request) -> Response | None:
        """The gate's verdict on a head, then the body budget for its declared length."""
        refusal = self.gate.admit(req)
        if refusal is None and self.budget is not None and req.body.length:
            if not self.budget.take(req.owner, req.body.length):
                self.gate.release(req)  # the key's slot back: the request is not run
                refusal = over_budget()
            else:
                req.held = req.body.length
        return refusal

    def release(self, req: Request) -> None:
        """Once per request: its key slot and body budget back."""
        if req.released:
            return
        req.released = True
        if self.budget is not None and req.held:
            self.budget.give(req.owner, req.held)
            req.held = 0
        self.gate.release(req)

    async def shutdown(self, timeout_s: float = 60.0, poll_s: float = 0.05) -> None:
        """Close idle connections; wait for the requests in flight, then close the rest
        (`poll_s`: how often requests answered from callbacks, with no task, are looked at)."""
        self.stopping = True
        clock = self.guard.clock
        deadline = clock() + timeout_s
        conns = list(self.guard.open)
        for c in conns:
            if not c.busy:
                c.abort()
        tasks = [c.task for c in conns if c.task is not None and not c.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        while clock() < deadline and any(c.busy and c.task is None for c in self.guard.open):
            await asyncio.sleep(poll_s)
        for c in list(self.guard.open):
            c.abort()


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop the server runs on: uvloop's (libuv) when installed, else None
    (asyncio's default). Measured (issue 43, a stub engine answering in 18 ms, one client):
    about 0.1 ms less gateway CPU per request than asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def over_budget() -> Response:
    return error(
        503,
        "the gateway holds as many request bodies as it may now; retry shortly",
        "ServiceUnavailableError",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


class _Stop(Exception):
    """Raised in a parser callback: parse no further on this connection."""


def target_path(target: str) -> str:
    """The path of a request target (origin or absolute form), without query or fragment;
    BadRequest for other forms. llhttp has checked its characters."""
    if target[:1] != "/":
        low = target[:8].lower()
        if low.startswith("http://") or low.startswith("https://"):
            rest = target[target.find("//") + 2 :]
            ends = [i for i in (rest.find(c) for c in "/?#") if i >= 0]
            at = min(ends) if ends else len(rest)
            target = rest[at:] if rest[at : at + 1] == "/" else "/"
        elif target == "*":
            return target
        else:
            raise BadRequest(400, "the request target is not a path")
    return target.partition("?")[0].partition("#")[0]  # up to the first of them


class Conn(asyncio.Protocol):
    """One client connection: requests parsed, gated, handled one at a time, answered in
    order."""

    def __init__(self, server: Server):
        self.server, self.guard = server, server.guard
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.closing = False
        self.busy = False  # a request's handler runs (its head is in) until its answer ends
        self.header_since: float | None = None  # first byte of a head not yet whole
        self.idle_since: float | None = None  # no request since (keep-alive timeout)
        self.task: asyncio.Task[None] | None = None
        self.current: Request | None = None  # the request being handled
        self._parser = httptools.HttpRequestParser(self)
        self._parsing: Request | None = None  # the request whose body is being parsed
        self._pending: collections.deque[Request | Response] = collections.deque()
        self._stopped = False  # nothing more is parsed (a refusal, a malformed request)
        self._in_body = False
        self._url = b""
        self._fields: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0  # received since the last whole head
        self._tail = b""  # the last bytes of a head not yet whole (its blank line may span)
        self._wire = self._got = self._chunks = 0  # the chunked body now parsed
        self._drain: asyncio.Future[None] | None = None
        self._write_paused = self._read_paused = False
        self._linger: asyncio.TimerHandle | None = None
        self._dropped = 0  # bytes dropped after parsing stopped
        self._receiving = False  # in data_received
        self.auth_memo: Any = None  # the gate's memo of this connection's key (auth.py)
        # a request the server's `fast` may take, waiting (with no task) for its body
        self._waiting: Request | None = None
        self._wait_timer: asyncio.TimerHandle | None = None

    # ----- transport events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self.guard.admit(self):
            self.closing = True
            cast(asyncio.Transport, transport).abort()
            return
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        self.idle_since = self.guard.clock()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.guard.forget(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()  # the client left: its handler stops (and its upstream request)
        elif self.current is not None:
            exchange = self.current.exchange
            if exchange is not None:  # its upstream request stops, its slot is given back
                exchange.client_gone()
            self.server.release(self.current)
        gone = ConnectionResetError("the client closed the connection")
        if self._parsing is not None:
            self._parsing.body.fail(gone)
        self._drop_pending()
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(gone)
        if self._linger is not None:
            self._linger.cancel()
        self._waiting = None
        if self._wait_timer is not None:
            self._wait_timer.cancel()

    def data_received(self, data: bytes) -> None:
        self._receiving = True
        try:
            self._received(data)
        finally:
            self._receiving = False
        if self._waiting is not None:
            self._settle()

    def _received(self, data: bytes) -> None:
        if self._linger is not None or self._stopped:  # after a refusal or an answer that
            self._dropped += len(data)  # left the body unread: dropped, up to LINGER_BYTES
            if self._dropped > LINGER_BYTES:
                self.abort()
            return
        if not self._in_body and not self.busy and self.header_since is None:
            self.header_since = self.guard.clock()
        view = memoryview(data)
        at = 0
        n = len(data)
        while at < n:
            if self._in_body:
                # a chunked body in slices: its framing is counted as it goes (llhttp reads
                # extensions and trailers without a bound); any other body at once
                chunked = self._parsing is not None and self._parsing.body.length is None
                end = min(at + FRAMING_SLICE, n) if chunked else n
                self._wire += end - at
                if not self._feed(view[at:end]):
                    return
                at = end
                if chunked and self._over_framing(0):
                    return
                continue
            # a head is fed alone, up to its blank line: what follows is the body's
            end = self._head_end(data, at)
            self._tail = data[max(at, n - 3) :] if end < 0 else b""
            end = n if end < 0 else end
            self._head_bytes += end - at
            if not self._feed(view[at:end]):
                return
            at = end
        if not self._in_body and self._head_bytes > MAX_HEAD:
            self._refuse(BadRequest(431, f"the request head exceeds {MAX_HEAD} bytes"))

    def _over_framing(self, slack: int) -> bool:
        """Whether the chunked body being parsed has more bytes that are not data than its
        chunk count allows (less `slack` bytes the count may hold beyond it); if so its
        read fails with a 400 and parsing stops."""
        over = self._wire - slack - self._got > FRAMING_BYTES + FRAMING_PER_CHUNK * self._chunks
        if over:
            self._fail_body(
                BadRequest(
                    400,
                    "the chunked body's size lines, extensions and trailers exceed "
                    f"{FRAMING_BYTES} bytes plus {FRAMING_PER_CHUNK} per chunk",
                )
            )
        return over

    def _head_end(self, data: bytes, start: int) -> int:
        """Where in `data` the head being read from `start` ends (past its blank line), or
        -1; the blank line may have begun in the bytes before (`_tail`). llhttp takes CRLF
        only."""
        if self._tail and start == 0:
            at = (self._tail + data[:3]).find(b"\r\n\r\n")
            if at >= 0:
                return at + 4 - len(self._tail)
        at = data.find(b"\r\n\r\n", start)
        return at + 4 if at >= 0 else -1

    def _feed(self, data: bytes | memoryview) -> bool:
        """Parse `data`; False when parsing stopped (a refusal, a malformed request)."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            bug = e.__context__
            if bug is not None and not isinstance(bug, _Stop):  # a callback (the gate) failed
                self.server.log.error("a request head failed: %r", bug)
                self._refuse(BadRequest(500, "the gateway failed on this request (logged)"))
            elif not self._stopped:  # (a callback's own refusal already stopped it)
                self._malformed(e)
            return False
        return not self._stopped

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # ----- parser callbacks (httptools)

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        # (their count and length are checked when the head is whole; a trailer's are
        # bounded with the framing, and it is not read)
        self._fields.append((name, value))

    def on_headers_complete(self) -> None:
        head_bytes, self._head_bytes = self._head_bytes, 0
        try:
            req = self._request(head_bytes)
        except BadRequest as e:
            self._refuse(e)
            raise _Stop from None
        self._in_body = not req.body.done
        refusal = self.server.admit(req)
        if refusal is None:
            expect = req.headers.get("expect")
            if expect and req.version == (1, 1):
                if expect.lower() != "100-continue":
                    self.server.release(req)
                    refusal = error(
                        417, f"unknown Expect: {expect[:100]}", "ExpectationFailedError"
                    )
                else:
                    req.body.expect = not req.body.done  # until a byte of it comes
        if refusal is not None:
            req.refusal, req.keep_alive = refusal, req.keep_alive and req.body.done
            req.released = True  # the gate took nothing (or gave it back)
        if self._in_body:
            self._parsing = req
            self._wire = 0
            self._got = 0
            self._chunks = 0
        self._queue(req)
        if refusal is not None and self._in_body:
            self._stopped = True  # its body is never read
            raise _Stop

    def on_body(self, data: bytes) -> None:
        req = self._parsing
        assert req is not None
        self._got += len(data)
        budget = self.server.budget
        if req.body.length is None and budget is not None:  # chunked: held as it comes
            if not budget.take(req.owner, len(data)):
                self._fail_body(OverBudget("the gateway's body budget is spent"))
                raise _Stop
            req.held += len(data)
        req.body.feed(data)

    def on_chunk_header(self) -> None:
        self._chunks += 1
        if self._chunks > MAX_CHUNKS:
            self._fail_body(BadRequest(413, f"the body comes in more than {MAX_CHUNKS} chunks"))
            raise _Stop

    def on_message_complete(self) -> None:
        self._url, self._fields = b"", []  # the next head starts empty (and so did the first)
        req = self._parsing
        if req is not None:
            if req.body.length is None and self._over_framing(FRAMING_SLICE):
                raise _Stop  # (the slice it ended in may hold the next request's bytes)
            self._parsing, self._in_body = None, False
            req.body.end()

    def _request(self, head_bytes: int) -> Request:
        """The request whose head (of `head_bytes`) the parser just read; BadRequest for what
        llhttp lets through and the gateway does not serve."""
        p = self._parser
        version = p.get_http_version()
        if version not in ("1.1", "1.0"):
            raise BadRequest(505, "only HTTP/1.0 and HTTP/1.1 are served")
        if p.should_upgrade():
            raise BadRequest(400, "CONNECT and Upgrade are not served")
        fields = self._fields
        if head_bytes > MAX_LINE and any(len(n) + len(v) > MAX_LINE for n, v in fields):
            raise BadRequest(431, f"a header field exceeds {MAX_LINE} bytes")
        if len(fields) > MAX_HEADERS:
            raise BadRequest(431, f"more than {MAX_HEADERS} headers")
        # one dict in C, the first of repeated names kept (reversed: the last write wins)
        headers = {n.decode("latin-1").lower(): v.decode("latin-1") for n, v in reversed(fields)}
        if len(headers) < len(fields) and [n.lower() for n, _ in fields].count(b"host") > 1:
            raise BadRequest(400, "more than one Host header")
        major_minor = (1, 1) if version == "1.1" else (1, 0)
        if major_minor == (1, 1) and "host" not in headers:
            raise BadRequest(400, "an HTTP/1.1 request needs a Host header")
        te = dict.get(headers, "transfer-encoding")
        if te is not None:
            if te.lower() != "chunked":
                raise BadRequest(501, f"Transfer-Encoding {te[:40]!r} is not supported")
            length = None
        else:
            length = int(dict.get(headers, "content-length", 0))  # llhttp checked its digits
        target = self._url.decode("latin-1")
        req = Request(
            self, p.get_method().decode(), target_path(target), major_minor, headers, length
        )
        req.target = target
        return req

    # ----- requests

    def _queue(self, req: Request | Response) -> None:
        """Start a request, or keep it until the one before it is answered."""
        if self.busy:
            self._pending.append(req)
            self.pause_reading()  # one request ahead parsed at most (within one read)
        else:
            self._start(req)

    def _start(self, req: Request | Response) -> None:
        self.busy = True
        self.header_since = None
        self.idle_since = None
        if isinstance(req, Response):  # a request that could not be read
            self._write(req, "GET", f"Content-Length: {len(req.body)}\r\nConnection: close\r\n")
            self._linger_close()
            return
        self.current = req
        if req.refusal is not None:
            self.answer(req, req.refusal)
            self._finish(req)
            return
        if req.fast and not req.body.done:
            self._waiting = req  # its body may be in the bytes still to parse, or come soon
            if not self._receiving:  # (else data_received settles once it has parsed)
                self._settle()
            return
        self._go(req)

    def _settle(self) -> None:
        """Run the request waiting for its body once the body is whole, or cannot come
        without a reader (failed, paused, owed a `100 Continue`); else within FAST_WAIT_S
        (then as a task, which reads it within the body timeout)."""
        req = self._waiting
        if req is None:
            return
        body = req.body
        if not (body.done or body.error is not None or body.expect or self._read_paused):
            if self._wait_timer is None:
                self._wait_timer = asyncio.get_running_loop().call_later(
                    FAST_WAIT_S, self._stop_waiting
                )
            return
        self._waiting = None
        if self._wait_timer is not None:
            self._wait_timer.cancel()
            self._wait_timer = None
        self._go(req)

    def _stop_waiting(self) -> None:
        """FAST_WAIT_S passed: the request runs as a task, which reads its body."""
        self._wait_timer = None
        req, self._waiting = self._waiting, None
        if req is not None:
            self._go(req)

    def _go(self, req: Request) -> None:
        """Run a request: by the server's `fast` when it takes it, else as a task."""
        if req.fast and req.body.done and not self.closing:
            fast = self.server.fast
            if fast is not None and fast(req):
                return
        self.run(req)

    def run(self, req: Request, work: Callable[[], Awaitable[Answer]] | None = None) -> None:
        """Run the request's handler (or `work`) as a task that answers it."""
        self.task = asyncio.get_running_loop().create_task(self._run(req, work))

    def respond(self, req: Request, resp: Response) -> None:
        """Answer the current request from a callback (what `_run` does for a task)."""
        self.answer(req, resp)
        self._finish(req)

    async def _run(self, req: Request, work: Callable[[], Awaitable[Answer]] | None) -> None:
        try:
            resp = await (work() if work is not None else self.server.handler(req))
            if isinstance(resp, StreamResponse):
                if not resp.prepared:
                    await resp.prepare(req)
                await resp.write_eof()
            else:
                self.answer(req, resp)
        except (asyncio.CancelledError, ConnectionError):
            self.server.release(req)
            self.abort()  # the client left
            return
        except Exception as e:
            self.server.log.exception("%s %s failed: %s", req.method, req.path[:100], e)
            if req.started:  # a stream already begun cannot become an error answer
                self.server.release(req)
                self.abort()
                return
            req.keep_alive = False
            self.answer(
                req,
                error(500, "the gateway failed on this request (logged)", "InternalServerError"),
            )
        self._finish(req)

    def answer(self, req: Request, resp: Response) -> None:
        """Write a whole answer (its head only, to HEAD)."""
        req.keep_alive = req.keep_alive and req.body.done and not self.server.stopping
        framing = f"Content-Length: {len(resp.body)}\r\n"
        if not req.keep_alive:
            framing += "Connection: close\r\n"
        self._write(resp, req.method, framing)

    def _write(self, resp: Response, method: str, framing: str) -> None:
        if self.closing or self.transport is None:
            return
        body = resp.body
        head = render_head(resp.status, resp.headers, framing)
        if method == "HEAD" or not body:
            self.transport.write(head)
        elif len(body) <= 16384:  # one write, one copy: cheaper than two sends
            self.transport.write(head + body)
        else:
            self.transport.writelines((head, body))

    def _finish(self, req: Request) -> None:
        """After an answer: the next request, or the connection's end."""
        self.task, self.current = None, None
        self.server.release(req)
        if self.closing:
            return
        if not (req.keep_alive and req.body.done and not self.server.stopping):
            if req.body.done and not self._pending:
                self.close()
            else:
                self._linger_close()
            return
        self.busy, self.idle_since = False, self.guard.clock()
        if self._pending:
            self._start(self._pending.popleft())
        elif self._head_bytes:  # part of the next head came while this one was handled
            self.header_since = self.guard.clock()
        if self._read_paused and not self._pending:
            self.resume_reading()

    def _drop_pending(self) -> None:
        for waiting in self._pending:
            if isinstance(waiting, Request):
                self.server.release(waiting)
        self._pending.clear()

    def _refuse(self, e: BadRequest) -> None:
        """A request that cannot be read: answered (after those before it), then the
        connection closes; nothing more is parsed."""
        self._stopped = True
        self._queue(error(e.status, str(e), _KINDS.get(e.status, "BadRequestError")))

    def _malformed(self, e: Exception) -> None:
        """What llhttp refused: in a body, the handler's read fails; else a 400 (505)."""
        reason = str(e) or type(e).__name__
        if self._in_body:
            self._fail_body(BadRequest(400, f"malformed body: {reason}"))
        elif "version" in reason.lower():
            self._refuse(BadRequest(505, f"only HTTP/1.0 and HTTP/1.1 are served ({reason})"))
        else:
            self._refuse(BadRequest(400, f"malformed request: {reason}"))

    def _fail_body(self, e: Exception) -> None:
        """The body being parsed is refused: its handler's read raises `e`; the connection
        closes once it is answered."""
        self._stopped = True
        req = self._parsing
        if req is not None:
            req.keep_alive = False
            req.body.fail(e)

    # ----- writing and closing

    def write(self, data: bytes) -> None:
        if not self.closing and self.transport is not None:
            self.transport.write(data)

    async def drain(self) -> None:
        if self.closing:
            raise ConnectionResetError("the client closed the connection")
        if self._write_paused:
            self._drain = asyncio.get_running_loop().create_future()
            await self._drain

    def pause_reading(self) -> None:
        if not self._read_paused and self.transport is not None and not self.closing:
            self._read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._pending:
            return  # requests wait their turn: read no more until they are started
        if self._read_paused and self.transport is not None and not self.closing:
            self._read_paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        """Close once what was written is sent."""
        if self.transport is not None and not self.closing:
            self.closing = True
            self.transport.close()

    def abort(self) -> None:
        """Close at once (a client that left, an idle connection evicted or timed out)."""
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    def _linger_close(self) -> None:
        """Send what was written and the end of our side, then drop what the client still
        sends for LINGER_S (at most LINGER_BYTES): closing with unread bytes would reset the
        connection, and the client might lose its answer. A client that keeps sending past
        the bound is reset: it is not reading its answer anyway."""
        if self.transport is None or self.closing:
            return
        self._drop_pending()
        self._read_paused = True  # (so that resume_reading below does resume)
        self.resume_reading()
        if not self.transport.can_write_eof():
            self.close()
            return
        try:
            self.transport.write_eof()
        except OSError:  # the peer is gone already (ENOTCONN): nothing to linger for
            self.abort()
            return
        self._linger = asyncio.get_running_loop().call_later(LINGER_S, self.abort)
