"""The gateway's life cycle and routes, and the ways to run it (CLI, a thread for tests).

Routes: POST /v1/completions, /v1/chat/completions, /v1/embeddings and /v1/responses
(proxy.py), GET /v1/models, /health
(the gateway's view of every instance) and /metrics (Prometheus). Any other path or method
gets an OpenAI-style JSON error (404, or 405 with `Allow`). Who may call which route: auth.py
(keys, limits; /metrics and the detailed /health need an admin key or a loopback peer).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from planner.adjuster.backends.base import InstanceControl
from planner.adjuster.gateway.answers import error
from planner.adjuster.gateway.auth import Auth, check_bind
from planner.adjuster.gateway.guard import (
    Guard,
    GuardedSite,
    connection_cap,
    http_logger,
    mark_busy,
    raise_open_file_limit,
)
from planner.adjuster.gateway.health import Health
from planner.adjuster.gateway.metrics import Metrics
from planner.adjuster.gateway.pool import Inst, Pool
from planner.adjuster.gateway.proxy import PROXIED, Proxy
from planner.adjuster.gateway.requestlog import REQUEST_LOG, RequestLog
from planner.adjuster.gateway.tiers import Tiers
from planner.adjuster.gateway.waker import Waker
from planner.errors import InputError
from planner.optimizer import admission, swap
from planner.schemas.plan import Point

_GETS = ("/v1/models", "/health", "/metrics")
log = logging.getLogger("planner.gateway")


@dataclass
class GatewayConfig:
    """Knobs of the gateway (defaults suit a small team's cluster)."""

    queue_limit: int = admission.QUEUE_LIMIT  # of one model waiting (wake or slot); next: 503
    admit_factor: float = admission.ADMIT_FACTOR  # awake instance: max_num_seqs x this at once
    retries: int = 2  # tries again on another (or restarted) instance, nothing sent yet
    wake_timeout_s: float = 900.0  # longest a wake (start on the CPU build) may take
    drain_timeout_s: float = 60.0  # a co-tenant's in-flight requests finish (or time out)
    min_awake_s: float = swap.MIN_AWAKE_S  # a woken model keeps its memory this long...
    swap_max_wait_s: float = swap.MAX_WAIT_S  # ...unless a request waited this (or its SLO)
    wake_notice_s: float = 2.0  # a streaming client waiting for a wake hears this often
    health_interval_s: float = 5.0  # probe period of instances that should be awake
    health_timeout_s: float = 5.0  # one /health probe; 3 timeouts in a row count as dead
    backoff_base_s: float = 1.0  # first restart delay after a death
    backoff_cap_s: float = 60.0  # restart delays double up to this
    request_timeout_s: float = 900.0  # one proxied request, end to end
    retry_after_s: float = 10.0  # Retry-After before any wake of that model was timed
    log_flush_s: float = 0.5  # request-log batch period
    control_threads: int = 4  # threads running InstanceControl calls
    adopt_every: int = 2  # every this many health rounds, follow apply (point, instances)
    tier_interval_s: float = 10.0  # how often the point's awake hours and idle sleeps apply
    wake_check_timeout_s: float = 120.0  # the one-token check after a wake
    # clients (guard.py; nginx's defaults)
    header_timeout_s: float = 60.0  # a request's headers arrive within this
    body_timeout_s: float = 60.0  # longest pause between two reads of a body
    keepalive_timeout_s: float = 75.0  # an idle kept-alive connection closes
    max_connections: int = 4096  # open at once (also bounded by the open-file limit)
    max_body_bytes: int = 16 * 1024 * 1024  # larger bodies get 413
    warn_every_s: float = 60.0  # a recurring error (log write, accept) is logged this often
    # request log (requestlog.py)
    log_max_pending: int = 100_000  # rows kept while the log cannot be written
    log_max_age_s: float = 90 * 86400.0  # rows this much older than the newest are deleted
    log_max_bytes: int = 1 << 30  # the oldest rows go beyond this much data


class Gateway:
    """The proxy's state and handlers; `serve()` runs it."""

    def __init__(
        self,
        point: Point,
        control: InstanceControl,
        *,
        state_dir: str | Path,
        config: GatewayConfig | None = None,
        clock: Callable[[], float] = time.time,
        auth: Auth | None = None,
    ):
        self.control = control
        self.auth = auth if auth is not None else Auth.open(state_dir)  # default: no keys
        self.cfg = config or GatewayConfig()
        self.pool = Pool(point, self.cfg.admit_factor, clock)
        self.metrics = Metrics()
        cfg = self.cfg
        self.log = RequestLog(
            Path(state_dir) / REQUEST_LOG, max_pending=cfg.log_max_pending,
            max_age_s=cfg.log_max_age_s, max_bytes=cfg.log_max_bytes,
            warn_every_s=cfg.warn_every_s,
        )  # fmt: skip
        self.guard = Guard(cfg.max_connections, cfg.header_timeout_s, cfg.warn_every_s)
        self.waker = Waker(self)
        self.health = Health(self)
        self.tiers = Tiers(self)
        self.proxy = Proxy(self)
        self.session: aiohttp.ClientSession | None = None
        self._pool = ThreadPoolExecutor(self.cfg.control_threads, thread_name_prefix="control")
        self._tasks: list[asyncio.Task] = []
        self.drained = ""  # why nothing may start or wake (`planner down`), or ""

    @property
    def point(self) -> Point:
        """The point the gateway routes by."""
        return self.pool.point

    @property
    def instances(self) -> dict[str, Inst]:
        return self.pool.instances

    # ----- life cycle

    async def start(self) -> None:
        """Open the backend session, read the instances' status, start the loops."""
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=self.cfg.request_timeout_s),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # one user's cookies must never reach another's
        )
        await self.refresh()
        self._tasks = [
            asyncio.create_task(self.health.loop()),
            asyncio.create_task(self._flush_loop()),
            asyncio.create_task(self.tiers.loop()),
            asyncio.create_task(self.auth.watch()),
            asyncio.create_task(self.guard.loop()),
        ]

    async def close(self) -> None:
        """Stop the loops, close the session, flush the log."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self.session is not None:
            await self.session.close()
        lost = await asyncio.get_running_loop().run_in_executor(self._pool, self.log.close)
        self.metrics.log_lost += lost
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def call(self, fn: Any, *args: Any) -> Any:
        """Run a blocking InstanceControl call in the gateway's threads."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def refresh(self) -> None:
        """Take status and handles from the controller (at start; after external changes)."""
        self.set_drained(await self.call(self.control.drained))
        st = await self.call(self.control.status)
        for iid, inst in self.pool.instances.items():
            status, handle = st.get(iid, ("stopped", None))
            inst.status, inst.handle = status, handle
            inst.want_awake = inst.spec.tier == "gpu" or status == "awake"
            if status == "awake" and inst.idle_since_s == -math.inf:
                inst.idle_since_s = self.pool.clock()  # idle, as far as the gateway knows

    def set_drained(self, why: str) -> None:
        """Follow `planner down` (why != "") and the next apply (""): while drained, every
        request gets 503 and no instance is started, woken or restarted."""
        if why and not self.drained:
            for inst in self.pool.instances.values():
                inst.want_awake = False
                if inst.status != "stopped":
                    inst.status, inst.handle = "stopped", None
            self.pool.wake_all_waiters()
        self.drained = why

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.log_flush_s)
            if self.log.pending():
                try:
                    await self.call(self.log.flush)
                except Exception as e:  # the loop outlives any failure; the log says why
                    log.warning("request log flush failed: %s", e)

    def app(self) -> web.Application:
        """The aiohttp application with every route."""
        app = web.Application(
            client_max_size=self.cfg.max_body_bytes, middlewares=[mark_busy, self.auth.middleware]
        )
        app.router.add_get("/v1/models", self.h_models)
        app.router.add_get("/health", self.h_health)
        app.router.add_get("/metrics", self.h_metrics)
        for path in PROXIED:
            app.router.add_post(path, self.proxy.handle)
        app.router.add_route("*", "/{tail:.*}", self.h_other)  # last: what nothing else took
        return app

    # ----- handlers

    async def h_models(self, request: web.Request) -> web.Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "planner"}
            for m in sorted(self.pool.by_model)
            if self.auth.allows(request, m)
        ]
        return web.json_response({"object": "list", "data": data})

    async def h_health(self, request: web.Request) -> web.Response:
        if not self.auth.details(request):  # liveness only, to anyone
            return web.json_response({"status": "ok", "auth": self.auth.mode})
        inst = {
            i.spec.id: {"model": i.spec.model, "status": i.status, "outstanding": i.outstanding}
            for i in self.pool.instances.values()
        }
        return web.json_response(
            {"status": "ok", "auth": self.auth.mode, "point": self.point.name, "instances": inst}
        )

    async def h_metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=self.metrics.render(self._gauges, self._totals()) + self.auth.render_metrics(),
            content_type="text/plain",
            charset="utf-8",
        )

    async def h_other(self, request: web.Request) -> web.Response:
        """404 for unknown paths, 405 for a known path with another method (JSON bodies)."""
        path = request.path
        if path in PROXIED or path in _GETS:
            allow = "POST" if path in PROXIED else "GET"
            return error(
                405, f"{request.method} is not allowed on {path}; use {allow}",
                "MethodNotAllowedError", headers={"Allow": allow},
            )  # fmt: skip
        paths = sorted((*PROXIED, *_GETS))
        return error(404, f"no route {path}; routes: {paths}", "NotFoundError")

    def _gauges(self) -> dict[str, tuple[str, dict[str, float]]]:
        pool = self.pool
        models = sorted(pool.by_model)
        return {
            "planner_gateway_awake_instances": (
                "Awake instances by model.",
                {m: sum(i.status == "awake" for i in pool.by_model[m]) for m in models},
            ),
            "planner_gateway_outstanding_requests": (
                "Requests being served by model.",
                {m: sum(i.outstanding for i in pool.by_model[m]) for m in models},
            ),
            "planner_gateway_queued_requests": (
                "Requests waiting for a wake or a slot by model.",
                {m: pool.waiting[m] for m in models},
            ),
        }

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
            "planner_gateway_log_rows_pending": ("Request-log rows waiting to be written.", lg.pending()),
            "planner_gateway_connections_open": ("Client connections open.", g["open"]),
            "planner_gateway_connections_evicted_total": (
                "Idle client connections closed at the connection cap.", g["evicted"],
            ),
            "planner_gateway_connections_refused_total": (
                "Client connections refused at the cap (every one busy).", g["refused"],
            ),
            "planner_gateway_header_timeouts_total": (
                "Client connections closed: headers not in within the timeout.",
                g["header_timeouts"],
            ),
        }  # fmt: skip


# --------------------------------------------------------------------------- running it


async def serve(
    gateway: Gateway, host: str, port: int, stop: asyncio.Event, ready: Any = None
) -> None:
    """Run the gateway until `stop` is set; then finish in-flight requests and close.

    Handler cancellation is on: a client that disconnects cancels its request's handler,
    which closes the upstream request (vLLM aborts it) instead of generating for nobody.
    A non-loopback `host` without keys is refused (auth.check_bind) before anything starts.
    """
    check_bind(host, gateway.auth.table is not None, gateway.auth.insecure)
    cfg = gateway.cfg
    gateway.guard.cap = connection_cap(cfg.max_connections, raise_open_file_limit())
    asyncio.get_running_loop().set_exception_handler(gateway.guard.loop_errors)
    runner = web.AppRunner(
        gateway.app(), access_log=None, handle_signals=False, handler_cancellation=True,
        keepalive_timeout=cfg.keepalive_timeout_s, logger=http_logger(cfg.warn_every_s),
    )  # fmt: skip
    await runner.setup()
    try:
        site = GuardedSite(runner, gateway.guard, host, port, backlog=1024, reuse_address=True)
        try:
            await site.start()
        except OSError as e:
            raise port_error(host, port, e) from None
        await gateway.start()
        if ready is not None:
            ready()
        await stop.wait()
    finally:
        await runner.shutdown()  # stops accepting; waits for in-flight handlers
        await runner.cleanup()
        await gateway.close()


def port_error(host: str, port: int, e: OSError) -> InputError:
    """A port the gateway cannot listen on, with the fix (exit 2)."""
    if e.errno == errno.EADDRINUSE:
        why, fix = (
            "is in use",
            f"stop what listens there (`ss -ltnp 'sport = :{port}'`) or pass another --port",
        )
    elif e.errno == errno.EACCES:
        why, fix = "needs privileges", "use a port above 1023"
    else:
        why, fix = f"cannot be listened on ({e.strerror})", "pass another --host or --port"
    return InputError(f"{host}:{port} {why}", path="--port", fix=fix)


class GatewayThread:
    """The gateway on its own event loop in a thread (tests and benches)."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 8000):
        self.gateway, self.host, self.port = gateway, host, port
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="gateway", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve(self.gateway, self.host, self.port, self._stop, self._ready.set)

        try:
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                runner.run(main())
        except BaseException as e:
            self._error = e
        finally:
            self._ready.set()

    def start(self, timeout_s: float = 30.0) -> GatewayThread:
        self._thread.start()
        self._ready.wait(timeout_s)
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)

    def call(self, coro: Any, timeout_s: float = 60.0) -> Any:
        """Run a coroutine on the gateway's loop (e.g. `gateway.refresh()`)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)


def _loop_factory() -> Any:
    """uvloop's loop when installed (lower per-request overhead), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_forever(gateway: Gateway, host: str, port: int, ready: Any = None) -> None:
    """Serve until SIGTERM/SIGINT; then drain in-flight requests and close (the CLI;
    `ready()` once it listens). SIGHUP re-reads the keys file."""
    import signal

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, gateway.auth.reload)
        await serve(gateway, host, port, stop, ready)

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(main())
