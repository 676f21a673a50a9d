"""HTTP and streaming pass-through: admission, retries, client disconnects, the request log.

Paths: /v1/completions, /v1/chat/completions, /v1/embeddings and /v1/responses (PROXIED),
all alike: the body's `model` picks the instances, with the same waking, stand-ins,
admission bounds and request log; only how a stream's usage is read differs (sse.py).

A request goes to the instance `tiering.route` picks (the awake one with the fewest
requests in flight). When none of its model's instances is awake, it goes to an awake
stand-in where the point's substitute rule says so (`tiering.substitute`: always while the
model wakes, or when the wait expected from its last measured wake exceeds its switch SLO;
before any wake was measured the wait counts as exceeding it), with the body's `model`
rewritten to the stand-in's and the answer's `model` back to the name asked for, and the
model's wake starts all the same unless the rule says not to; otherwise it waits for a wake
(waker.py). Every answer carries `X-Planner-Served-By: MODEL`. When every awake instance
already holds its admission bound (pool.py), a request waits for a slot. At most `queue_limit` requests of a model wait in all; the next gets 503 with
Retry-After. Bytes are streamed through untouched, with one exception: to log token counts
of a streamed request, the gateway asks the engine for `stream_options.include_usage` when
the client did not, and drops that extra usage-only chunk (`"choices": []`) before it
reaches the client (sse.py).

Failures. An engine that fails before a byte of its answer reached the client (refused,
reset, died while generating a non-streamed answer or before the first streamed chunk, or
answered a server error) is probed; a dead one is marked failed (the next pick restarts it)
and the request is tried again, up to `retries` times; a live one's error answer is passed
on. A request that still finds no live instance gets 503 with Retry-After, so that the
client retries too. A client that leaves cancels its handler
(aiohttp handler cancellation): the upstream request is closed at once, which makes vLLM
abort it, streamed or not, and the request is logged as 499 `client gone`.

User and session (auth.py): with keys, the key's name (NAME/X-User under a `trusted_proxy`
key) and `X-Session`; without, `X-User` / `X-Session`, or an `Authorization: Bearer KEY`
becomes the user `key-<12 hex of an HMAC of KEY with the install's secret>` (never the key).
A key may be refused a model (403) or a request over its limits (429) before any routing.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import time
from typing import TYPE_CHECKING

import aiohttp
import yarl
from aiohttp import web

from planner.adjuster.gateway.answers import Unavailable, error, unavailable
from planner.adjuster.gateway.body import BadBody, cut, parse, read_body
from planner.adjuster.gateway.pool import Inst, load
from planner.adjuster.gateway.sse import SseUsage, rename_model, tokens, usage_in
from planner.adjuster.gateway.stream import (
    SERVED_BY,
    ClientGone,
    end_stream,
    event_stream,
    send,
)
from planner.optimizer import tiering

if TYPE_CHECKING:
    from planner.adjuster.gateway.server import Gateway

log = logging.getLogger("planner.gateway")

# Proxied POST paths -> whether a stream's usage must be asked for (`stream_options`): the
# Responses API always ends its stream with usage (`response.completed`) and has no such
# option; embeddings are never streamed.
ASK_STREAM_USAGE = {
    "/v1/completions": True,
    "/v1/chat/completions": True,
    "/v1/embeddings": False,
    "/v1/responses": False,
}
PROXIED = tuple(ASK_STREAM_USAGE)
_KINDS = {408: "RequestTimeoutError", 413: "RequestEntityTooLargeError"}


def _variant(inst: Inst) -> str:
    return inst.spec.variant


def _has_slot(inst: Inst) -> bool:
    """Awake and below its admission bound: a stand-in takes only what it can serve now."""
    return inst.routable() and inst.outstanding < inst.limit


class _NoAnswer(Exception):
    """The engine failed before any byte of its answer reached the client: no answer, or a
    server error (`answer`: passed on when the engine turns out to be alive)."""

    def __init__(self, message: str, answer: web.Response | None = None):
        super().__init__(message)
        self.answer = answer


@functools.lru_cache(maxsize=1024)
def _url(text: str) -> yarl.URL:
    """Upstream URLs parsed once per instance and path, not once per request."""
    return yarl.URL(text)


class _Req:
    """One request's bookkeeping for the log."""

    __slots__ = (
        "early", "model", "request", "served_by", "session", "stream", "t0", "t_arr", "user",
        "wait_s",
    )  # fmt: skip

    def __init__(self, user: str, session: str) -> None:
        self.t_arr = time.time()
        self.t0 = time.perf_counter()
        self.user, self.session = user, session
        self.model = ""
        self.served_by = ""  # the stand-in that answered ("": the model itself)
        self.wait_s = 0.0  # time waiting for a wake, s
        self.request: web.Request | None = None
        self.stream = False
        self.early: web.StreamResponse | None = None  # a stream begun while waiting

    def since_s(self) -> float:
        return time.perf_counter() - self.t0


class Proxy:
    """The handler of every proxied path (PROXIED): completions, chat, embeddings, responses."""

    def __init__(self, gw: Gateway):
        self.gw = gw
        self.latency_s: dict[str, float] = {}  # moving average per model (Retry-After)

    def fail(self, r: _Req, status: int, msg: str) -> None:
        gw = self.gw
        # Unknown names share one label: clients must not grow the metric without bound.
        label = r.model if r.model in gw.pool.by_model else "(unknown)"
        gw.metrics.requests[(label, status)] += 1
        gw.log.add_failure(
            (r.t_arr, r.user, r.session, r.model, status, r.since_s(), r.wait_s, msg)
        )

    async def handle(self, request: web.Request) -> web.StreamResponse:
        user, session = self.gw.auth.identity(request)
        r = _Req(cut(user), cut(session))
        r.request = request
        try:
            out = await self._handle(request, r)
            if r.early is not None and out is not r.early:  # a stream already begun
                return await end_stream(r.early, request, out)
            return out
        except asyncio.CancelledError:
            self.fail(r, 499, "client gone")
            raise
        except ClientGone:
            self.fail(r, 499, "client gone")
            return web.Response(status=499)  # never sent: the connection is closed
        except web.HTTPException as e:  # e.g. a body over the size limit
            self.fail(r, e.status, e.reason)
            return error(e.status, e.reason, type(e).__name__)
        finally:
            self.gw.auth.release(request)  # the key's slot, when `admit` took one

    async def _handle(self, request: web.Request, r: _Req) -> web.StreamResponse:
        gw = self.gw
        try:
            body = await read_body(request, gw.cfg.max_body_bytes, gw.cfg.body_timeout_s)
            payload = parse(body)
        except BadBody as e:
            gw.metrics.malformed[e.reason] += 1
            self.fail(r, e.status, e.message)
            kind = _KINDS.get(e.status, "BadRequestError")
            return error(e.status, e.message, kind, param=e.param)
        model = payload["model"]
        r.model = cut(model)
        denied = gw.auth.admit(request, model)  # 403 / 429 by the key (before any 404)
        if denied is not None:
            self.fail(r, denied.status, "key refused")
            return denied
        if model not in gw.pool.by_model:
            names = sorted(gw.pool.by_model)
            self.fail(r, 404, "unknown model")
            return error(
                404, f"model {r.model!r} is not served here; models: {names}", "NotFoundError",
                models=names,
            )  # fmt: skip
        stream = r.stream = bool(payload.get("stream"))
        strip_usage = False
        if stream and ASK_STREAM_USAGE[request.path]:
            opts = payload.get("stream_options") or {}
            if not opts.get("include_usage"):
                payload["stream_options"] = {**opts, "include_usage": True}
                body = json.dumps(payload).encode()
                strip_usage = True

        tries = gw.cfg.retries + 1
        for attempt in range(tries):
            try:
                inst = await self.pick(model, r)
            except Unavailable as e:
                self.fail(r, 503, str(e))
                return unavailable(e)
            send, rename = body, None
            if inst.spec.model != model:  # a stand-in answers under the name asked for
                send = json.dumps({**payload, "model": inst.spec.model}).encode()
                rename = (inst.spec.model, model)
            try:
                return await self.forward(request, inst, send, stream, strip_usage, r, rename)
            except _NoAnswer as e:
                # Nothing reached the client: if the engine is gone, route around it (the
                # next pick restarts it) and follow the point in force (a hop may have
                # replaced it), then try again.
                log.warning("instance %s gave no answer: %s", inst.spec.id, e)
                dead = inst.handle is None or not await gw.health.probe(inst)
                if dead and inst.status == "awake":
                    gw.health.mark_dead(inst)
                    await gw.health.adopt()
                if not dead and e.answer is not None:  # a live engine's own error: pass it on
                    self.fail(r, e.answer.status, "engine error")
                    return e.answer
                if attempt + 1 < tries:
                    continue
                msg = f"instance {inst.spec.id} gave no answer ({e}) after {tries} tries"
                if dead:
                    self.fail(r, 503, msg)
                    return unavailable(Unavailable(msg, gw.waker.retry_after_s(model)))
                self.fail(r, 502, msg)
                return error(502, msg, "BadGatewayError")
        raise AssertionError("unreachable")

    def choose(self, model: str) -> Inst | None:
        """The instance a request for `model` goes to now (`tiering.route`); None: none is up."""
        return tiering.route(self.gw.pool.by_model[model], Inst.routable, load)

    def stand_in(self, model: str) -> tuple[Inst, float] | None:
        """The awake stand-in that answers for `model` now, and its quality penalty
        (`tiering.substitute`); None: the request waits for the model."""
        gw = self.gw
        rule = gw.point.substitutes.get(model)
        if rule is None:
            return None
        pool = gw.pool
        cands = tiering.stand_ins(rule, lambda m: pool.by_model.get(m, ()), _variant)
        victims = gw.waker.plan(model)[1] if rule.wake and pool.by_model.get(model) else []
        wait_s = gw.waker.expected_wait_s(model)
        return tiering.substitute(rule, wait_s, cands, _has_slot, load, victims)

    async def pick(self, model: str, r: _Req) -> Inst:
        """An instance of `model` with a free slot (taken); waits for a wake or a slot."""
        gw = self.gw
        pool, cfg = gw.pool, gw.cfg
        gw.tiers.hand_off(model)
        wakes = 0
        while True:
            if gw.drained:
                raise Unavailable(gw.drained, cfg.retry_after_s)
            inst = self.choose(model)
            if inst is not None:
                if inst.outstanding < inst.limit and not pool.queued_for_admission(model):
                    pool.take(inst)
                    return inst
                if pool.waiting[model] >= cfg.queue_limit:
                    raise Unavailable(
                        f"model {model!r}: every instance holds its {inst.limit} requests and "
                        f"{pool.waiting[model]} more wait (queue limit {cfg.queue_limit})",
                        max(1.0, self.latency_s.get(model, 1.0)),
                    )
                pool.waiting[model] += 1
                try:
                    got = await pool.wait_slot(model)
                finally:
                    pool.waiting[model] -= 1
                if got is None:
                    continue
                if got.routable():
                    return got
                pool.release(got)
                continue
            got = self.stand_in(model)
            if got is not None:
                sub = got[0]
                pool.take(sub)
                r.served_by = sub.spec.model
                if gw.point.substitutes[model].wake:
                    gw.waker.start_wake(model)
                return sub
            if wakes >= 3:
                raise Unavailable(
                    f"model {model!r} did not stay awake", gw.waker.retry_after_s(model)
                )
            wakes += 1
            t = time.perf_counter()
            try:
                await self._await_wake(model, r)
            finally:
                r.wait_s += time.perf_counter() - t

    async def _await_wake(self, model: str, r: _Req) -> None:
        """Wait for the model's wake; a streaming client hears an SSE comment every
        `wake_notice_s` meanwhile (proxies and chat UIs do not time out)."""
        gw = self.gw
        if not r.stream or r.request is None:
            return await gw.waker.await_wake(model)
        task = asyncio.ensure_future(gw.waker.await_wake(model))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=gw.cfg.wake_notice_s)
                if done:
                    return task.result()
                if r.early is None:
                    r.early = event_stream(model)
                eta_s = gw.waker.expected_wait_s(model)
                about = f"about {eta_s:.0f} s" if math.isfinite(eta_s) else "time unknown"
                await send(r.early, r.request, f": waking {model}, {about}\n\n".encode())
        finally:
            if not task.done():
                task.cancel()

    async def forward(
        self,
        request: web.Request,
        inst: Inst,
        body: bytes,
        stream: bool,
        strip_usage: bool,
        r: _Req,
        rename: tuple[str, str] | None = None,
    ) -> web.StreamResponse:
        """Send the request to `inst` (whose slot the caller took) and pass its answer on
        (`rename`: (stand-in, asked-for) model names, for an answer from a stand-in)."""
        gw = self.gw
        session = gw.session
        assert session is not None
        usage: dict | None = None
        ttft_s: float | None = None
        status = 502
        resp: web.StreamResponse | None = None
        inst.last_used_s = time.monotonic()
        try:
            async with session.post(
                _url(inst.url + request.path),
                data=body,
                headers=inst.post_headers,
            ) as up:
                status = up.status
                ctype = up.headers.get("Content-Type", "application/json")
                if not (stream and status == 200 and ctype.startswith("text/event-stream")):
                    data = await up.read()
                    ttft_s = r.since_s()
                    if status == 200:
                        usage = usage_in(data)
                        if rename:
                            data = rename_model(data, *rename)
                    resp = web.Response(
                        body=data,
                        status=status,
                        headers={
                            "Content-Type": ctype.partition(";")[0],
                            SERVED_BY: inst.spec.model,
                        },
                    )
                    if status >= 500:  # a dying engine answers 500 ("EngineCore ..."): probe
                        raise _NoAnswer(f"the engine answered {status}", answer=resp)
                else:
                    resp = r.early or event_stream(inst.spec.model)
                    sse = SseUsage(strip_usage, rename)
                    async for chunk in up.content.iter_any():
                        if ttft_s is None:
                            ttft_s = r.since_s()
                        out = sse.feed(chunk)
                        if out:
                            await send(resp, request, out)
                    out = sse.close()
                    if out:
                        await send(resp, request, out)
                    usage = sse.usage
                    await send(resp, request, b"", eof=True)
        except (aiohttp.ClientError, ConnectionError) as e:
            if resp is None or not resp.prepared:
                raise _NoAnswer(str(e) or type(e).__name__) from e
            msg = f"instance {inst.spec.id} failed mid-stream: {e or type(e).__name__}"
            self.fail(r, 502, msg)
            return resp
        except TimeoutError as e:
            msg = f"instance {inst.spec.id} failed: {e or type(e).__name__}"
            self.fail(r, 502, msg)
            if resp is not None and resp.prepared:
                return resp
            return error(502, msg, "BadGatewayError")
        finally:
            gw.pool.release(inst)
        self._done(r, inst, status, ttft_s, usage)
        return resp

    def _done(
        self, r: _Req, inst: Inst, status: int, ttft_s: float | None, usage: dict | None
    ) -> None:
        """Count and log an answered request."""
        gw = self.gw
        latency_s = r.since_s()
        model = r.model
        if status != 200:
            self.fail(r, status, "engine error")
            return
        m = gw.metrics
        m.requests[(model, 200)] += 1
        if r.served_by:
            m.substitutions[(model, r.served_by)] += 1
        m.latency[model].observe(latency_s)
        if r.wait_s > 0.001:  # only requests that waited for a wake
            m.switch_wait[model].observe(r.wait_s)
        if ttft_s is not None:
            m.ttft[model].observe(ttft_s)
        prev = self.latency_s.get(model)
        self.latency_s[model] = latency_s if prev is None else 0.9 * prev + 0.1 * latency_s
        n_in, n_out, cached = tokens(usage)
        gw.log.add((
            r.t_arr, r.user, r.session, model, n_in, n_out, cached, ttft_s, latency_s, r.wait_s,
            200, inst.spec.id, r.served_by, int(bool(r.served_by)),
        ))  # fmt: skip
