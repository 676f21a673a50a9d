"""A proxied request: its body checked, admitted, an instance chosen, retries, client gone.

Paths: the engines' API routes (PROXIED: /v1/completions, /v1/chat/completions,
/v1/embeddings, /v1/responses, and Anthropic's /v1/messages and /v1/messages/count_tokens),
all alike; a model asked on a route of another task (embeddings of a chat model) gets a 400
naming its task: the body's `model` picks the instances, with the same waking, stand-ins,
admission bounds and request log; only how a stream's usage is read differs (sse.py).
Passing the answer on is forward.py's; counting and logging the outcome record.py's.

A request goes to the instance `serving_rule.route` picks (the awake one with the fewest
requests in flight). When none of its model's instances is awake, it goes to an awake
stand-in where the point's substitute rule says so (`serving_rule.substitute`: always while the
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
(h1server.py): the upstream request is closed at once, which makes vLLM
abort it, streamed or not, and the request is logged as 499 `client gone`.

User and session (auth.py): with keys, the key's name (NAME/X-User under a `trusted_proxy`
key) and `X-Session`; without, `X-User` / `X-Session`, or an `Authorization: Bearer KEY`
becomes the user `key-<12 hex of an HMAC of KEY with the install's secret>` (never the key).
A key may be refused a request over its limits (429, on the head: auth.gate) or a model
(403, once the body names it) before any routing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from planner.adjuster.gateway.answers import Unavailable, error, unavailable
from planner.adjuster.gateway.auth import Auth
from planner.adjuster.gateway.body import MAX_NAME, BadBody, cut, parse, read_body
from planner.adjuster.gateway.config import GatewayConfig
from planner.adjuster.gateway.exchange import Exchange
from planner.adjuster.gateway.forward import Forwarder, NoAnswer
from planner.adjuster.gateway.h1server import RETRY_AFTER_S, Request
from planner.adjuster.gateway.health import Health
from planner.adjuster.gateway.pool import Inst, Pool, load
from planner.adjuster.gateway.record import Recorder, RequestRecord
from planner.adjuster.gateway.reply import Response, StreamResponse
from planner.adjuster.gateway.stream import ClientGone, end_stream, event_stream, send
from planner.adjuster.gateway.tiers import Tiers
from planner.adjuster.gateway.upstream import Upstream
from planner.adjuster.gateway.waker import Waker
from planner.engines.base import api_routes, get_engine, stream_usage_routes
from planner.optimizer import serving_rule

if TYPE_CHECKING:
    from planner.schemas.plan import Instance

log = logging.getLogger("planner.gateway")

# Proxied POST paths (the engines' route tables: planner/engines/), and those whose streams
# report usage only when asked (`stream_options`).
PROXIED = tuple(api_routes())
ASK_STREAM_USAGE = stream_usage_routes()
_KINDS = {
    408: "RequestTimeoutError",
    413: "RequestEntityTooLargeError",
    503: "ServiceUnavailableError",
}


def _variant(inst: Inst) -> str:
    return inst.spec.variant


def _has_slot(inst: Inst) -> bool:
    """Awake and below its admission bound: a stand-in takes only what it can serve now."""
    return inst.routable() and inst.outstanding < inst.limit


class Proxy:
    """The handler of every proxied path (PROXIED): completions, chat, embeddings, responses."""

    def __init__(
        self,
        pool: Pool,
        up: Upstream,
        waker: Waker,
        health: Health,
        tiers: Tiers,
        auth: Auth,
        rec: Recorder,
        cfg: GatewayConfig,
    ):
        self.pool = pool
        self.up = up
        self.waker = waker
        self.health = health
        self.tiers = tiers
        self.auth = auth
        self.rec = rec
        self.cfg = cfg
        self.forwarder = Forwarder(pool, up, rec)
        # (model, path) -> (the spec it was judged on, wrong_task's verdict): judged once per
        # spec, not per request (the engine lookup and its flag scan cost CPU on the hot path)
        self._task_verdicts: dict[tuple[str, str], tuple[Instance, str | None]] = {}

    async def handle(self, request: Request) -> Response | StreamResponse:
        user, session = self.auth.identity(request)
        r = self.rec.start(cut(user), cut(session), request)
        return await self._guarded(request, r, self._handle(request, r))

    def fast(self, request: Request) -> bool:
        """Start `request` in callbacks (exchange.py) when it is the common case: not
        streamed, its body whole and valid, its key allowed its model, and an instance of
        the model awake with a free slot, no queue and a kept-alive connection. False, with
        nothing done, for anything else: `handle` runs it as a task."""
        body = request.body.ready()
        if body is None or len(body) > self.cfg.max_body_bytes:
            return False
        try:
            payload = parse(body)
        except BadBody:
            return False
        model = payload["model"]
        if payload.get("stream") or self.up.drained or model not in self.pool.by_model:
            return False
        if not self.auth.allows(request, model) or self.wrong_task(model, request.path):
            return False
        inst = self.choose(model)
        if inst is None or inst.outstanding >= inst.limit or self.pool.queued_for_admission(model):
            return False
        conn = self.up.http.take(inst.addr)
        if conn is None:
            return False
        # from here on as `handle` and `pick` do it (`cut` only what is too long)
        user, session = self.auth.identity(request)
        if len(user) > MAX_NAME or len(session) > MAX_NAME or len(model) > MAX_NAME:
            user, session, model = cut(user), cut(session), cut(model)
        r = self.rec.start(user, session, request)
        r.model = model
        self.tiers.hand_off(payload["model"])
        self.pool.take(inst)
        Exchange(self, request, r, inst, payload, body, conn).send()
        return True

    def resume(self, x: Exchange, failure: NoAnswer | None) -> None:
        """Go on with an exchange on the general path, as a task, once its slot was given
        back: its instance gave no answer (`failure`, the first try), or its kept-alive
        connection was closed before a byte came (None: a new pick and connection, not a
        try, as `Http1.post` retries such a connection)."""
        request, r = x.request, x.r
        failed = (x.inst, failure) if failure is not None else None

        def work() -> Awaitable[Response | StreamResponse]:
            forward = self._forward(request, r, x.payload, x.body, False, False, failed)
            return self._guarded(request, r, forward)

        request.conn.run(request, work)

    async def _guarded(
        self, request: Request, r: RequestRecord, work: Awaitable[Response | StreamResponse]
    ) -> Response | StreamResponse:
        """`work`'s answer to `request`; a client that left is recorded (499)."""
        try:
            out = await work
            if r.early is not None and out is not r.early:  # a stream already begun
                return await end_stream(r.early, request, out)
            return out
        except asyncio.CancelledError:
            self.rec.fail(r, 499, "client gone")
            raise
        except ClientGone:
            self.rec.fail(r, 499, "client gone")
            return Response(status=499)  # never sent: the connection is closed

    async def _handle(self, request: Request, r: RequestRecord) -> Response | StreamResponse:
        cfg = self.cfg
        fail = self.rec.fail
        try:
            body = await read_body(
                request, cfg.max_body_bytes, cfg.body_timeout_s, self.rec.clock.mono_s
            )
            payload = parse(body)
        except BadBody as e:
            self.rec.metrics.malformed[e.reason] += 1
            fail(r, e.status, e.message)
            kind = _KINDS.get(e.status, "BadRequestError")
            retry = {"Retry-After": str(RETRY_AFTER_S)} if e.status == 503 else None
            return error(e.status, e.message, kind, headers=retry, param=e.param)
        model = payload["model"]
        r.model = cut(model)
        refused = self._refusal(request, r, model)
        if refused is not None:
            return refused
        stream = r.stream = bool(payload.get("stream"))
        strip_usage = False
        if stream and request.path in ASK_STREAM_USAGE:
            opts = payload.get("stream_options") or {}
            if not opts.get("include_usage"):
                payload["stream_options"] = {**opts, "include_usage": True}
                body = json.dumps(payload).encode()
                strip_usage = True
        return await self._forward(request, r, payload, body, stream, strip_usage)

    def _refusal(self, request: Request, r: RequestRecord, model: str) -> Response | None:
        """The answer to a request its key may not send, for a model not served here or one
        that does not serve its path; None when it may go on."""
        fail = self.rec.fail
        denied = self.auth.admit(request, model)  # 403 by the key (before any 404)
        if denied is not None:
            fail(r, denied.status, "key refused")
            return denied
        if model not in self.pool.by_model:
            names = sorted(self.pool.by_model)
            fail(r, 404, "unknown model")
            return error(
                404,
                f"model {r.model!r} is not served here; models: {names}",
                "NotFoundError",
                models=names,
            )
        wrong = self.wrong_task(model, request.path)
        if wrong is not None:
            fail(r, 400, "wrong task")
            return error(400, wrong, "BadRequestError", param="model")
        return None

    async def _forward(
        self,
        request: Request,
        r: RequestRecord,
        payload: dict,
        body: bytes,
        stream: bool,
        strip_usage: bool,
        failed: tuple[Inst, NoAnswer] | None = None,
    ) -> Response | StreamResponse:
        """Forward the request to an instance of its model, and to another (or the same,
        restarted) when one gives no answer, up to `retries` more times (`failed`: the
        instance an exchange sent it to, which gave no answer, as the first try)."""
        model = payload["model"]
        fail = self.rec.fail
        tries = self.cfg.retries + 1
        for attempt in range(tries):
            if failed is not None:
                inst, e = failed
                failed = None
            else:
                try:
                    inst = await self.pick(model, r)
                except Unavailable as u:
                    fail(r, 503, str(u))
                    return unavailable(u)
                send, rename = body, None
                if inst.spec.model != model:  # a stand-in answers under the name asked for
                    send = json.dumps({**payload, "model": inst.spec.model}).encode()
                    rename = (inst.spec.model, model)
                try:
                    return await self.forwarder.forward(
                        request, inst, send, stream, strip_usage, r, rename
                    )
                except NoAnswer as no:
                    e = no
            # Nothing reached the client: if the engine is gone, route around it (the
            # next pick restarts it) and follow the point in force (a hop may have
            # replaced it), then try again.
            log.warning("instance %s gave no answer: %s", inst.spec.id, e)
            dead = inst.handle is None or not await self.health.probe(inst)
            if dead and inst.status == "awake":
                self.health.mark_dead(inst)
                await self.health.adopt()
            if not dead and e.answer is not None:  # a live engine's own error: pass it on
                fail(r, e.answer.status, "engine error")
                return e.answer
            if attempt + 1 < tries:
                continue
            msg = f"instance {inst.spec.id} gave no answer ({e}) after {tries} tries"
            if dead:
                fail(r, 503, msg)
                return unavailable(Unavailable(msg, self.waker.retry_after_s(model)))
            fail(r, 502, msg)
            return error(502, msg, "BadGatewayError")
        raise AssertionError("unreachable")

    def wrong_task(self, model: str, path: str) -> str | None:
        """Why `model` cannot answer on `path` (an embedding model asked to chat, a chat model
        asked for embeddings), naming its task; None when it can."""
        spec = self.pool.by_model[model][0].spec
        known = self._task_verdicts.get((model, path))
        if known is not None and known[0] is spec:  # a new point gives new specs
            return known[1]
        engine = get_engine(spec.engine.kind)
        task, wants = engine.task(spec), engine.api_routes.get(path)
        if wants == task:
            verdict = None
        elif wants is None:
            verdict = f"model {model!r} runs on {engine.display_name}, which does not serve {path}"
        else:
            verdict = (
                f"model {model!r} is a {task} model (task: {task}); {path} serves {wants} models"
            )
        self._task_verdicts[(model, path)] = (spec, verdict)
        return verdict

    def choose(self, model: str) -> Inst | None:
        """The instance a request for `model` goes to now (`serving_rule.route`); None: none is up."""
        insts = self.pool.by_model[model]
        if len(insts) == 1:  # most models: route's choice, without its calls
            return insts[0] if insts[0].routable() else None
        return serving_rule.route(insts, Inst.routable, load)

    def stand_in(self, model: str) -> tuple[Inst, float] | None:
        """The awake stand-in that answers for `model` now, and its quality penalty
        (`serving_rule.substitute`); None: the request waits for the model."""
        pool, waker = self.pool, self.waker
        rule = pool.point.substitutes.get(model)
        if rule is None:
            return None
        cands = serving_rule.stand_ins(rule, lambda m: pool.by_model.get(m, ()), _variant)
        victims = waker.plan(model)[1] if rule.wake and pool.by_model.get(model) else []
        wait_s = waker.expected_wait_s(model)
        return serving_rule.substitute(rule, wait_s, cands, _has_slot, load, victims)

    async def pick(self, model: str, r: RequestRecord) -> Inst:
        """An instance of `model` with a free slot (taken); waits for a wake or a slot."""
        pool = self.pool
        cfg = self.cfg
        waker = self.waker
        clock = self.rec.clock
        self.tiers.hand_off(model)
        wakes = 0
        while True:
            if self.up.drained:
                raise Unavailable(self.up.drained, cfg.retry_after_s)
            inst = self.choose(model)
            if inst is not None:
                if inst.outstanding < inst.limit and not pool.queued_for_admission(model):
                    pool.take(inst)
                    return inst
                if pool.waiting[model] >= cfg.queue_limit:
                    raise Unavailable(
                        f"model {model!r}: every instance holds its {inst.limit} requests and "
                        f"{pool.waiting[model]} more wait (queue limit {cfg.queue_limit})",
                        max(1.0, self.rec.latency_s(model) or 1.0),
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
                if pool.point.substitutes[model].wake:
                    waker.start_wake(model)
                return sub
            if wakes >= 3:
                raise Unavailable(f"model {model!r} did not stay awake", waker.retry_after_s(model))
            wakes += 1
            t = clock.mono_s()
            try:
                await self._await_wake(model, r)
            finally:
                r.wait_s += clock.mono_s() - t

    async def _await_wake(self, model: str, r: RequestRecord) -> None:
        """Wait for the model's wake; a streaming client hears an SSE comment every
        `wake_notice_s` meanwhile (proxies and chat UIs do not time out)."""
        waker = self.waker
        if not r.stream or r.request is None:
            return await waker.await_wake(model)
        task = asyncio.ensure_future(waker.await_wake(model))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.cfg.wake_notice_s)
                if done:
                    return task.result()
                if r.early is None:
                    r.early = event_stream(model)
                eta_s = waker.expected_wait_s(model)
                about = f"about {eta_s:.0f} s" if math.isfinite(eta_s) else "time unknown"
                await send(r.early, r.request, f": waking {model}, {about}\n\n".encode())
        finally:
            if not task.done():
                task.cancel()
