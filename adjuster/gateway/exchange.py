"""A proxied request's common case, run in callbacks: no task, no coroutine, no future.

The common case (`Proxy.fast` decides, before any side effect): a non-streamed request whose
body came whole with its head, for a model with an awake instance that has a free slot and
no queue, and a kept-alive connection to that instance. The request is written on that
connection from the client connection's parser callback, and the answer is passed on from
the engine connection's (http1.py: the exchange is the answer's sink), with the same slot,
record and headers as forward.py gives a task's. Anything else, and an engine that gives no
answer, goes on as a task on the general path (`Proxy.resume`), where retries, probes and
their answers are written once.

Why: at one client the gateway sleeps between a request and its answer, and everything a
request runs after a wake runs with cold caches, so its CPU grows with the code it touches
(bench/gateway_overhead.py's docstring has the figures); a task, its coroutine chain and the
futures it awaits were a fifth of it.
"""

from __future__ import annotations

from typing import Any, Protocol

from planner.adjuster.gateway.answers import error
from planner.adjuster.gateway.forward import Forwarder, NoAnswer, whole
from planner.adjuster.gateway.h1server import Request
from planner.adjuster.gateway.http1 import Connection, UpstreamError, message, render_head
from planner.adjuster.gateway.pool import Inst, Pool
from planner.adjuster.gateway.record import Recorder, RequestRecord
from planner.adjuster.gateway.upstream import Upstream


class Proxy(Protocol):
    """What an exchange uses of the proxy that started it (proxy.py)."""

    forwarder: Forwarder
    rec: Recorder
    pool: Pool
    up: Upstream

    def resume(self, x: Exchange, failure: NoAnswer | None) -> None:
        """Go on as a task on the general path (the exchange has ended)."""
        ...


class Exchange:
    """One request sent to an instance whose slot it holds, until its answer is passed on,
    its engine fails (`Proxy.resume`), its deadline passes (`expire`: 502) or its client
    leaves (`client_gone`: 499); exactly one of them ends it."""

    __slots__ = ("addr", "body", "conn", "done", "inst", "payload", "proxy", "r", "request")

    def __init__(
        self,
        proxy: Proxy,
        request: Request,
        r: RequestRecord,
        inst: Inst,
        payload: dict[str, Any],
        body: bytes,
        conn: Connection,
    ):
        self.proxy = proxy
        self.request = request
        self.r = r
        self.inst = inst
        self.payload = payload
        self.body = body
        self.conn = conn
        self.addr = inst.addr  # where `conn` goes (the instance may get another handle)
        self.done = False

    def send(self) -> None:
        """Write the request to the instance; its deadline is `request_timeout_s` away."""
        inst, request = self.inst, self.request
        forwarder = self.proxy.forwarder
        now_s = inst.last_used_s = self.proxy.rec.clock.mono_s()
        forwarder.exchanges[self] = now_s + forwarder.up.request_timeout_s
        request.exchange = self
        head = render_head(*self.addr, request.path, inst.auth_items)
        self.conn.send(message(head, self.body), self)

    def _end(self) -> bool:
        """Whether this call ends the exchange (the first does): its deadline and slot go."""
        if self.done:
            return False
        self.done = True
        self.request.exchange = None
        proxy = self.proxy
        proxy.forwarder.exchanges.pop(self, None)
        proxy.pool.release(self.inst)
        return True

    # the answer's sink (http1.py)

    def answered(self, status: int, ctype: str, body: bytes, keep: bool) -> None:
        if not self._end():
            return
        inst, conn = self.inst, self.conn
        if keep:
            self.proxy.up.http.put(self.addr, conn)
        else:
            conn.abort()
        rec, r = self.proxy.rec, self.r
        ttft_s = rec.clock.mono_s() - r.t0
        try:
            resp, usage = whole(inst, status, ctype, body, None)
        except NoAnswer as e:  # a server error: is the engine alive?
            self.proxy.resume(self, e)
            return
        rec.done(r, inst, status, ttft_s, usage)
        self.request.conn.respond(self.request, resp)

    def failed(self, error: UpstreamError) -> None:
        if not self._end():
            return
        self.conn.abort()
        got = self.conn.got  # a kept-alive connection closed before a byte came: not a try
        self.proxy.resume(self, NoAnswer(str(error)) if got else None)

    # the other ends

    def expire(self, timeout_s: float) -> None:
        """No answer within `timeout_s`: 502, as a task's request past its deadline gets."""
        if not self._end():
            return
        self.conn.abort()
        msg = f"instance {self.inst.spec.id} failed: no answer within {timeout_s:g} s"
        self.proxy.rec.fail(self.r, 502, msg)
        self.request.conn.respond(self.request, error(502, msg, "BadGatewayError"))

    def client_gone(self) -> None:
        """The client left: the engine's request is aborted with its connection."""
        if not self._end():
            return
        self.conn.abort()
        self.proxy.rec.fail(self.r, 499, "client gone")
