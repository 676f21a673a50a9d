"""The gateway: its parts wired together, their life cycle, its HTTP/1.1 server (h1server.py).

Routes: POST /v1/completions, /v1/chat/completions, /v1/embeddings and /v1/responses
(proxy.py), GET /v1/models, /health (the gateway's view of every instance) and /metrics
(Prometheus) (routes.py). Any other path or method gets an OpenAI-style JSON error (404, or
405 with `Allow`). Who may call which route: auth.py. Each part receives only the
collaborators it uses (the pool, the upstream, the waker, the logs, the metrics, the
clock); none sees the `Gateway`. Running it: run.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from planner.adjuster.backends.base import InstanceControl
from planner.adjuster.gateway.accesslog import AccessLog
from planner.adjuster.gateway.anthropic import PATHS as ANTHROPIC_PATHS
from planner.adjuster.gateway.anthropic import as_anthropic_error
from planner.adjuster.gateway.auth import Auth
from planner.adjuster.gateway.body import cut, too_large
from planner.adjuster.gateway.clock import SYSTEM, Clock
from planner.adjuster.gateway.config import GatewayConfig
from planner.adjuster.gateway.guard import Guard, http_logger
from planner.adjuster.gateway.h1body import Budget
from planner.adjuster.gateway.h1server import Request, Server
from planner.adjuster.gateway.health import Health
from planner.adjuster.gateway.metrics import Metrics
from planner.adjuster.gateway.pool import Inst, Pool
from planner.adjuster.gateway.proxy import PROXIED, Proxy
from planner.adjuster.gateway.record import Recorder
from planner.adjuster.gateway.reply import Response, StreamResponse
from planner.adjuster.gateway.requestlog import REQUEST_LOG, RequestLog
from planner.adjuster.gateway.routes import GETS, Routes
from planner.adjuster.gateway.tiers import Tiers
from planner.adjuster.gateway.upstream import Upstream
from planner.adjuster.gateway.waker import Waker
from planner.schemas.plan import Point

__all__ = ["Gateway", "GatewayConfig"]

log = logging.getLogger("planner.gateway")


class Gateway:
    """The proxy's parts and their life cycle; `run.serve()` runs it.

    `clock`: the gateway's time (a bare callable: its epoch clock, as tests pass it);
    `access_log`: a file that gets one line per request (accesslog.py), or None.
    """

    def __init__(
        self,
        point: Point,
        control: InstanceControl,
        *,
        state_dir: str | Path,
        config: GatewayConfig | None = None,
        clock: Clock | Callable[[], float] | None = None,
        auth: Auth | None = None,
        access_log: str | Path | None = None,
    ):
        if clock is None or isinstance(clock, Clock):
            self.clock = clock or SYSTEM
        else:
            self.clock = Clock(now_s=clock)
        self.control = control
        self.auth = auth if auth is not None else Auth.open(state_dir)  # default: no keys
        cfg = self.cfg = config or GatewayConfig()
        self.pool = Pool(point, cfg.admit_factor, self.clock.now_s)
        self.metrics = Metrics()
        self.log = RequestLog(
            Path(state_dir) / REQUEST_LOG,
            max_pending=cfg.log_max_pending,
            max_age_s=cfg.log_max_age_s,
            max_bytes=cfg.log_max_bytes,
            warn_every_s=cfg.warn_every_s,
            clock=self.clock.now_s,
        )
        self.access = (
            AccessLog(access_log, warn_every_s=cfg.warn_every_s, clock=self.clock.mono_s)
            if access_log is not None
            else None
        )
        self.guard = Guard(
            cfg.max_connections,
            cfg.header_timeout_s,
            cfg.warn_every_s,
            self.clock.mono_s,
            keepalive_timeout_s=cfg.keepalive_timeout_s,
        )
        self.up = Upstream(control, self.pool, cfg.control_threads)
        self.waker = Waker(self.pool, self.up, cfg, self.metrics, self.clock)
        self.health = Health(self.pool, self.up, self.waker, cfg, self.clock)
        self.tiers = Tiers(self.pool, self.up, self.waker, cfg.tier_interval_s)
        self.recorder = Recorder(self.pool, self.metrics, self.log, self.clock, self.access)
        self.proxy = Proxy(
            self.pool, self.up, self.waker, self.health, self.tiers, self.auth, self.recorder, cfg
        )
        self.routes = Routes(self.pool, self.auth, self.metrics, self._totals, self.recorder.settle)
        r = self.routes
        gets = dict(zip(GETS, (r.h_models, r.h_health, r.h_metrics), strict=True))
        self._table: dict[tuple[str, str], Callable] = {
            **{("POST", path): self.proxy.handle for path in PROXIED},
            **{(m, path): h for path, h in gets.items() for m in ("GET", "HEAD")},
        }  # (method, path) -> handler; anything else: `h_other` (JSON 404 / 405)
        self.budget = Budget(cfg.body_budget_bytes, cfg.body_budget_per_key_bytes)
        self._tasks: list[asyncio.Task] = []

    @property
    def point(self) -> Point:
        """The point the gateway routes by."""
        return self.pool.point

    @property
    def instances(self) -> dict[str, Inst]:
        return self.pool.instances

    @property
    def drained(self) -> str:
        """Why nothing may start or wake (`planner down`), or ""."""
        return self.up.drained

    # ----- life cycle

    async def start(self) -> None:
        """Open the backend session, read the instances' status, start the loops."""
        cfg = self.cfg
        self.up.open(cfg.request_timeout_s)
        await self.refresh()
        self._tasks = [
            asyncio.create_task(self.health.loop()),
            asyncio.create_task(self._flush_loop()),
            asyncio.create_task(self.tiers.loop()),
            asyncio.create_task(self.auth.watch()),
            asyncio.create_task(self.guard.loop()),
            asyncio.create_task(self.proxy.forwarder.sweep(min(1.0, cfg.request_timeout_s / 4))),
        ]

    async def close(self) -> None:
        """Stop the loops, close the session, flush the logs."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await self.up.close_session()
        self.recorder.settle()
        lost = await self.up.call(self.log.close)
        self.metrics.log_lost += lost
        if self.access is not None:
            await self.up.call(self.access.close)
        self.up.threads.shutdown(wait=False, cancel_futures=True)

    async def refresh(self) -> None:
        """Take status and handles from the controller (at start; after external changes)."""
        await self.up.refresh()

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.log_flush_s)
            self.recorder.settle()
            for lg in (self.log, self.access):
                if lg is not None and lg.pending():
                    try:
                        await self.up.call(lg.flush)
                    except Exception as e:  # the loop outlives any failure; the log says why
                        log.warning("flush of %s failed: %s", lg.path, e)

    def server(self) -> Server:
        """The HTTP/1.1 server over `handle` (h1server.py), its connections guarded, each
        head gated (`admit`) and its body held against the budget."""
        return Server(
            self.handle,
            self.guard,
            http_logger(self.cfg.warn_every_s, self.clock.mono_s),
            gate=self,
            budget=self.budget,
            fast=self.proxy.fast,
        )

    def admit(self, request: Request) -> Response | None:
        """On a request's head (h1server.Gate): its route, then the key check and, for a
        proxied route, the key's limits (auth.py); a 413 for a declared body over the cap.
        A table and one call: the gateway's CPU per request is throughput lost on a machine
        its engines saturate."""
        handler = request.handler = self._table.get(
            (request.method, request.path), self.routes.h_other
        )
        proxied = handler == self.proxy.handle
        refusal = self.auth.gate(request, proxied)
        if refusal is None and proxied and (request.body.length or 0) > self.cfg.max_body_bytes:
            self.auth.release(request)
            refusal = too_large(self.cfg.max_body_bytes)
            self.metrics.malformed["too_large"] += 1
        if refusal is None:
            # the common case may run in callbacks; Anthropic's routes shape their errors
            request.fast = proxied and request.path not in ANTHROPIC_PATHS
            return None
        if refusal.status == 401:  # refused before any handler
            self.recorder.unkeyed(request.path)
        if proxied and refusal.status in (413, 429):
            user, session = self.auth.identity(request)
            why = "key refused" if refusal.status == 429 else "body too large"
            self.recorder.fail(
                self.recorder.start(cut(user), cut(session), request), refusal.status, why
            )
        # errors on an Anthropic route in the shape that API's clients read
        return as_anthropic_error(refusal) if request.path in ANTHROPIC_PATHS else refusal

    def release(self, request: Request) -> None:
        self.auth.release(request)

    async def handle(self, request: Request) -> Response | StreamResponse:
        """Every admitted request: the handler `admit` chose."""
        resp = await request.handler(request)
        if resp.status >= 400 and request.path in ANTHROPIC_PATHS and isinstance(resp, Response):
            return as_anthropic_error(resp)
        return resp

    def _totals(self) -> dict[str, tuple[str, float]]:
        """Unlabelled gauges and counters: the request log's and the connections' health."""
        lg, g = self.log, self.guard.counts
        return {
            "planner_gateway_log_write_failures_total": (
                "Request-log writes that failed (disk full, read-only); rows wait.",
                lg.write_failures,
            ),
            "planner_gateway_log_rows_dropped_total": (
                "Request-log rows dropped: the buffer was full while writes failed.",
                lg.dropped + self.metrics.log_lost,
            ),
            "planner_gateway_log_rows_pending": (
                "Request-log rows waiting to be written.",
                lg.pending(),
            ),
            "planner_gateway_connections_open": ("Client connections open.", g["open"]),
            "planner_gateway_connections_evicted_total": (
                "Idle client connections closed at the connection cap.",
                g["evicted"],
            ),
            "planner_gateway_connections_refused_total": (
                "Client connections refused at the cap (every one busy).",
                g["refused"],
            ),
            "planner_gateway_header_timeouts_total": (
                "Client connections closed: headers not in within the timeout.",
                g["header_timeouts"],
            ),
            "planner_gateway_body_bytes_held": (
                "Request body bytes held for requests in flight (the body budget's use).",
                self.budget.held,
            ),
            "planner_gateway_body_budget_refused_total": (
                "Requests answered 503 for lack of body budget (in all or of their key).",
                self.budget.refused,
            ),
        }
