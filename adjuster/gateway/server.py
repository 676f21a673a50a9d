"""The gateway's life cycle and routes, and the ways to run it (CLI, a thread for tests).

Routes: POST /v1/completions and /v1/chat/completions (proxy.py), GET /v1/models, /health
(the gateway's view of every instance) and /metrics (Prometheus). Any other path or method
gets an OpenAI-style JSON error (404, or 405 with `Allow`).
"""

from __future__ import annotations

import asyncio
import contextlib
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
from planner.adjuster.gateway.health import Health
from planner.adjuster.gateway.metrics import Metrics
from planner.adjuster.gateway.pool import Inst, Pool
from planner.adjuster.gateway.proxy import PROXIED, Proxy
from planner.adjuster.gateway.requestlog import REQUEST_LOG, RequestLog
from planner.adjuster.gateway.tiers import Tiers
from planner.adjuster.gateway.waker import Waker
from planner.optimizer import admission
from planner.schemas.plan import Point

_GETS = ("/v1/models", "/health", "/metrics")


@dataclass
class GatewayConfig:
    """Knobs of the gateway (defaults suit a small team's cluster)."""

    queue_limit: int = admission.QUEUE_LIMIT  # of one model waiting (wake or slot); next: 503
    admit_factor: float = admission.ADMIT_FACTOR  # awake instance: max_num_seqs x this at once
    retries: int = 2  # tries again on another (or restarted) instance, nothing sent yet
    wake_timeout_s: float = 900.0  # longest a wake (start on the CPU build) may take
    drain_timeout_s: float = 60.0  # longest to wait for a co-tenant's in-flight requests
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
    ):
        self.control = control
        self.cfg = config or GatewayConfig()
        self.pool = Pool(point, self.cfg.admit_factor, clock)
        self.metrics = Metrics()
        self.log = RequestLog(Path(state_dir) / REQUEST_LOG)
        self.waker = Waker(self)
        self.health = Health(self)
        self.tiers = Tiers(self)
        self.proxy = Proxy(self)
        self.session: aiohttp.ClientSession | None = None
        self._pool = ThreadPoolExecutor(self.cfg.control_threads, thread_name_prefix="control")
        self._tasks: list[asyncio.Task] = []

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
        await asyncio.get_running_loop().run_in_executor(self._pool, self.log.close)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def call(self, fn: Any, *args: Any) -> Any:
        """Run a blocking InstanceControl call in the gateway's threads."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def refresh(self) -> None:
        """Take status and handles from the controller (at start; after external changes)."""
        st = await self.call(self.control.status)
        for iid, inst in self.pool.instances.items():
            status, handle = st.get(iid, ("stopped", None))
            inst.status, inst.handle = status, handle
            inst.want_awake = inst.spec.tier == "gpu" or status == "awake"
            if status == "awake" and inst.idle_since_s == -math.inf:
                inst.idle_since_s = self.pool.clock()  # idle, as far as the gateway knows

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.log_flush_s)
            if self.log.pending():
                await self.call(self.log.flush)

    def app(self) -> web.Application:
        """The aiohttp application with every route."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
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
        ]
        return web.json_response({"object": "list", "data": data})

    async def h_health(self, request: web.Request) -> web.Response:
        inst = {
            i.spec.id: {"model": i.spec.model, "status": i.status, "outstanding": i.outstanding}
            for i in self.pool.instances.values()
        }
        return web.json_response({"status": "ok", "point": self.point.name, "instances": inst})

    async def h_metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=self.metrics.render(self._gauges), content_type="text/plain", charset="utf-8"
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


# --------------------------------------------------------------------------- running it


async def serve(
    gateway: Gateway, host: str, port: int, stop: asyncio.Event, ready: Any = None
) -> None:
    """Run the gateway until `stop` is set; then finish in-flight requests and close.

    Handler cancellation is on: a client that disconnects cancels its request's handler,
    which closes the upstream request (vLLM aborts it) instead of generating for nobody.
    """
    runner = web.AppRunner(
        gateway.app(), access_log=None, handle_signals=False, handler_cancellation=True
    )
    await runner.setup()
    await gateway.start()
    try:
        site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
        await site.start()
        if ready is not None:
            ready()
        await stop.wait()
    finally:
        await runner.shutdown()  # stops accepting; waits for in-flight handlers
        await runner.cleanup()
        await gateway.close()


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


def run_forever(gateway: Gateway, host: str, port: int) -> None:
    """Serve until SIGTERM/SIGINT; then drain in-flight requests and close (the CLI)."""
    import signal

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(gateway, host, port, stop)

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(main())
