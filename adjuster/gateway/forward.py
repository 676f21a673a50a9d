"""Sending a request to an instance and passing its answer on, streamed or not.

Bytes go through untouched, with two exceptions: a stream whose usage the gateway asked for
(`strip_usage`) loses that usage-only chunk, and an answer from a stand-in names the model
the client asked for (sse.py). An engine that fails before a byte of its answer reached the
client raises `NoAnswer` (proxy.py probes it and may try another); one that fails later
ends the stream, logged as 502. Each instance's slot is given back when its answer ends.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Protocol

import aiohttp
import yarl

from planner.adjuster.gateway.answers import error
from planner.adjuster.gateway.h1server import Request
from planner.adjuster.gateway.http1 import render_head
from planner.adjuster.gateway.pool import Inst, Pool
from planner.adjuster.gateway.record import Recorder, RequestRecord
from planner.adjuster.gateway.reply import Response, StreamResponse
from planner.adjuster.gateway.sse import SseUsage, rename_model
from planner.adjuster.gateway.stream import SERVED_BY, event_stream, send
from planner.adjuster.gateway.upstream import Upstream


class Timed(Protocol):
    """A request in flight in callbacks (exchange.py), which `sweep` ends at its deadline."""

    def expire(self, timeout_s: float) -> None:
        """Its deadline passed: end it (502)."""
        ...


class NoAnswer(Exception):
    """The engine failed before any byte of its answer reached the client: no answer, or a
    server error (`answer`: passed on when the engine turns out to be alive)."""

    def __init__(self, message: str, answer: Response | None = None):
        super().__init__(message)
        self.answer = answer


@functools.lru_cache(maxsize=1024)
def _url(text: str) -> yarl.URL:
    """Upstream URLs parsed once per instance and path, not once per request."""
    return yarl.URL(text)


class Forwarder:
    """Sends requests to instances over the upstream session and records their outcome."""

    def __init__(self, pool: Pool, up: Upstream, rec: Recorder):
        self.pool = pool
        self.up = up
        self.rec = rec
        # Non-streamed requests in flight -> their deadline (`request_timeout_s`), which
        # `sweep` enforces: a timer per request (asyncio.timeout) costs the event loop more
        # CPU than the rest of the lean client's request.
        self._due: dict[asyncio.Task[Any], float] = {}
        self._late: dict[asyncio.Task[Any], int] = {}  # cancelled by `sweep`: cancelling() before
        # Requests in flight in callbacks (exchange.py) -> their deadline
        self.exchanges: dict[Timed, float] = {}

    async def sweep(self, every_s: float) -> None:
        """Cancel the non-streamed requests past their deadline (each then answers 502, as
        a stream past aiohttp's total timeout does); `every_s`: the deadlines' precision."""
        while True:
            await asyncio.sleep(every_s)
            now = self.rec.clock.mono_s()
            for task, due in list(self._due.items()):
                if due <= now and task not in self._late:
                    self._late[task] = task.cancelling()
                    task.cancel()
            for x, due in list(self.exchanges.items()):
                if due <= now:
                    x.expire(self.up.request_timeout_s)

    async def forward(
        self,
        request: Request,
        inst: Inst,
        body: bytes,
        stream: bool,
        strip_usage: bool,
        r: RequestRecord,
        rename: tuple[str, str] | None = None,
    ) -> Response | StreamResponse:
        """Send the request to `inst` (whose slot the caller took) and pass its answer on
        (`rename`: (stand-in, asked-for) model names, for an answer from a stand-in)."""
        session = self.up.session
        assert session is not None and inst.handle is not None
        rec = self.rec
        usage: dict[str, Any] | bytes | None = None
        ttft_s: float | None = None
        status = 502
        resp: Response | StreamResponse | None = None
        now_s = inst.last_used_s = rec.clock.mono_s()
        try:
            if not stream:  # the hot path: a lean client (http1.py)
                h = inst.handle
                head = render_head(h.host, h.port, request.path, inst.auth_items)
                task = asyncio.current_task()
                assert task is not None
                self._due[task] = now_s + self.up.request_timeout_s
                try:
                    status, ctype, data = await self.up.http.post(h.host, h.port, head, body)
                except asyncio.CancelledError:
                    before = self._late.get(task)
                    if before is not None and task.uncancel() <= before:
                        # `sweep`'s cancel, not the client's
                        timeout_s = self.up.request_timeout_s
                        raise TimeoutError(f"no answer within {timeout_s:g} s") from None
                    raise
                finally:
                    del self._due[task]
                    self._late.pop(task, None)
                ttft_s = rec.since_s(r)
                resp, usage = whole(inst, status, ctype, data, rename)
            else:
                async with session.post(
                    _url(inst.url + request.path), data=body, headers=inst.post_headers
                ) as up:
                    status = up.status
                    ctype = up.headers.get("Content-Type", "application/json")
                    if status != 200 or not ctype.startswith("text/event-stream"):
                        data = await up.read()
                        ttft_s = rec.since_s(r)
                        resp, usage = whole(inst, status, ctype, data, rename)
                    else:
                        resp = r.early or event_stream(inst.spec.model)
                        ttft_s, usage = await self._stream(
                            up, resp, request, r, strip_usage, rename
                        )
        except (aiohttp.ClientError, ConnectionError) as e:
            if resp is None or not resp.prepared:
                raise NoAnswer(str(e) or type(e).__name__) from e
            msg = f"instance {inst.spec.id} failed mid-stream: {e or type(e).__name__}"
            rec.fail(r, 502, msg)
            return resp
        except TimeoutError as e:
            msg = f"instance {inst.spec.id} failed: {e or type(e).__name__}"
            rec.fail(r, 502, msg)
            if resp is not None and resp.prepared:
                return resp
            return error(502, msg, "BadGatewayError")
        finally:
            self.pool.release(inst)
        rec.done(r, inst, status, ttft_s, usage)
        return resp

    async def _stream(
        self,
        up: aiohttp.ClientResponse,
        resp: StreamResponse,
        request: Request,
        r: RequestRecord,
        strip_usage: bool,
        rename: tuple[str, str] | None,
    ) -> tuple[float | None, dict[str, Any] | None]:
        """Pass an event stream on; its TTFT and usage."""
        ttft_s = None
        sse = SseUsage(strip_usage, rename)
        async for chunk in up.content.iter_any():
            if ttft_s is None:
                ttft_s = self.rec.since_s(r)
            out = sse.feed(chunk)
            if out:
                await send(resp, request, out)
        out = sse.close()
        if out:
            await send(resp, request, out)
        await send(resp, request, b"", eof=True)
        return ttft_s, sse.usage


def whole(
    inst: Inst, status: int, ctype: str, data: bytes, rename: tuple[str, str] | None
) -> tuple[Response, bytes | None]:
    """A whole answer to pass on, and what its usage is read from (the answer's text, by the
    recorder: record.py); NoAnswer for a server error (a dying engine answers 500,
    "EngineCore ...": the caller probes it)."""
    usage = None
    if status == 200:
        usage = data
        if rename:
            data = rename_model(data, *rename)
    resp = Response(
        data, status, {"Content-Type": ctype.partition(";")[0], SERVED_BY: inst.spec.model}
    )
    if status >= 500:
        raise NoAnswer(f"the engine answered {status}", answer=resp)
    return resp, usage
