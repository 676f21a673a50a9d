"""The OpenAI-compatible gateway: routes by `model`, wakes sleeping models, logs requests.

One aiohttp server in front of the plan point's vLLM instances. A request goes to the awake
instance of its model with the fewest outstanding requests. When all of a model's instances
sleep, one of them is woken through `InstanceControl.wake` (in a thread, so the event loop
keeps serving): first its co-tenants (other host/disk-tier instances on the same node whose
GPU lists intersect its own) are drained (no new requests; in-flight ones finish) and put to
sleep. One wake runs per model at a time; the requests that arrive meanwhile queue behind it,
at most `queue_limit` of them, and the next one gets 503 with Retry-After.

Bytes are streamed through untouched, with one exception: to log token counts of a streamed
request, the gateway asks the engine for `stream_options.include_usage` when the client did
not, and then drops that extra usage-only chunk (`"choices": []`) before it reaches the
client. Only SSE events that contain a usage object are parsed; all others pass as they come.

Request log: SQLite table `requests` in `<state dir>/requests.sqlite`, one row per answered
request, columns of the trace schema (planner.trace: timestamp as seconds since the epoch,
user, session, model, input_tokens, output_tokens, cached_tokens) plus ttft_s, latency_s,
switch_wait_s (all measured from the request's arrival at the gateway), status and instance.
A request the engine answered counts at least one token each way (the trace schema's floor).
Rejected or failed requests (404, 503, 502, client gone) go to the table `failures` instead,
so `read_trace` on the file sees only real traffic. Rows are written in batches every
`log_flush_s` by a thread.

User and session: `X-User` / `X-Session` headers; without `X-User`, an `Authorization:
Bearer KEY` becomes the user `key-<first 12 hex of sha256(KEY)>` (the key itself is never
stored).

Health: every `health_interval_s` the gateway probes `/health` of each instance that should be
awake (tier gpu, or woken by the gateway); a dead one is restarted with `InstanceControl.wake`
after a capped exponential backoff (`backoff_base_s` * 2^(failures-1), at most
`backoff_cap_s`; `failures` resets only when a probe finds it healthy again). A request whose
connection fails before any answer probes the instance at once: dead, it is marked failed and
the request retried once (which restarts it). Every `adopt_every` rounds the controller's
status is read again, so instances started elsewhere (`planner apply`) are routed to. The
point follows `apply`: every `adopt_every` health rounds the gateway asks the controller
for the point in force (`follow`, when it has one) and, after a hop of `planner adjust` to
another point of the same plan, routes by the new point's instances and tiers; requests in
flight finish where they are. A new plan needs a gateway restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import math
import sqlite3
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yarl
from aiohttp import web

from planner.adjuster.backends.base import Handle, InstanceControl, Status
from planner.schemas.plan import Instance, Point

log = logging.getLogger("planner.gateway")

REQUEST_LOG = "requests.sqlite"
LOG_COLUMNS = (
    "timestamp",
    "user",
    "session",
    "model",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "ttft_s",
    "latency_s",
    "switch_wait_s",
    "status",
    "instance",
)
FAILURE_COLUMNS = (
    "timestamp",
    "user",
    "session",
    "model",
    "status",
    "latency_s",
    "switch_wait_s",
    "error",
)
_PROXIED = ("/v1/completions", "/v1/chat/completions")


@dataclass
class GatewayConfig:
    """Knobs of the gateway (defaults suit a small team's cluster)."""

    queue_limit: int = 64  # requests waiting on one model's wake; the next gets 503 (1..)
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
    adopt_every: int = 6  # every this many health rounds, adopt instances started elsewhere


class _NoAnswer(Exception):
    """The connection to an engine failed before any answer came back."""


class Unavailable(Exception):
    """No instance can take the request now; becomes a 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass
class _Inst:
    """What the gateway tracks of one instance."""

    spec: Instance
    _status: Status
    handle: Handle | None
    epoch: int = 0  # bumped on every status change: stale controller reads are dropped
    outstanding: int = 0
    draining: bool = False
    want_awake: bool = False  # tier gpu, or woken by the gateway: the health loop keeps it up
    failures: int = 0  # deaths and failed restarts since the last healthy probe
    timeouts: int = 0  # consecutive /health timeouts
    next_restart_at: float = 0.0
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def status(self) -> Status:
        return self._status

    @status.setter
    def status(self, value: Status) -> None:
        self._status = value
        self.epoch += 1

    @property
    def url(self) -> str:
        assert self.handle is not None
        return f"http://{self.handle.host}:{self.handle.port}"

    def routable(self) -> bool:
        return self.status == "awake" and self.handle is not None and not self.draining


@functools.lru_cache(maxsize=1024)
def _url(text: str) -> yarl.URL:
    """Upstream URLs parsed once per instance and path, not once per request."""
    return yarl.URL(text)


def overlaps(a: Instance, b: Instance) -> bool:
    """Whether two instances share a GPU: same node and intersecting device lists."""
    return a.node == b.node and bool(set(a.gpus) & set(b.gpus))


def identity(headers: Any) -> tuple[str, str]:
    """(user, session) from X-User / X-Session, or a hash of the bearer key as the user."""
    user = headers.get("X-User", "")
    if not user:
        auth = headers.get("Authorization", "")
        if auth[:7].lower() == "bearer " and auth[7:].strip():
            user = "key-" + hashlib.sha256(auth[7:].strip().encode()).hexdigest()[:12]
    return user, headers.get("X-Session", "")


# --------------------------------------------------------------------------- request log


class RequestLog:
    """Batched, thread-safe writer of the SQLite request log (WAL, so readers never block)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._rows: list[tuple] = []
        self._failures: list[tuple] = []
        self._con = sqlite3.connect(self.path, check_same_thread=False)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=NORMAL")
        self._con.execute(
            "CREATE TABLE IF NOT EXISTS requests (timestamp REAL NOT NULL, user TEXT NOT NULL,"
            " session TEXT NOT NULL, model TEXT NOT NULL, input_tokens INTEGER NOT NULL,"
            " output_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL DEFAULT 0,"
            " ttft_s REAL, latency_s REAL NOT NULL, switch_wait_s REAL NOT NULL DEFAULT 0,"
            " status INTEGER NOT NULL, instance TEXT NOT NULL)"
        )
        self._con.execute(
            "CREATE TABLE IF NOT EXISTS failures (timestamp REAL NOT NULL, user TEXT NOT NULL,"
            " session TEXT NOT NULL, model TEXT NOT NULL, status INTEGER NOT NULL,"
            " latency_s REAL NOT NULL, switch_wait_s REAL NOT NULL, error TEXT NOT NULL)"
        )
        self._con.commit()

    def add(self, row: tuple) -> None:
        """Queue one `requests` row (LOG_COLUMNS order)."""
        self._rows.append(row)

    def add_failure(self, row: tuple) -> None:
        """Queue one `failures` row (FAILURE_COLUMNS order)."""
        self._failures.append(row)

    def pending(self) -> bool:
        return bool(self._rows or self._failures)

    def flush(self) -> None:
        """Write the queued rows in one transaction."""
        with self._lock:
            rows, self._rows = self._rows, []
            fails, self._failures = self._failures, []
            if not rows and not fails:
                return
            if rows:
                marks = ",".join("?" * len(LOG_COLUMNS))
                self._con.executemany(
                    f"INSERT INTO requests ({','.join(LOG_COLUMNS)}) VALUES ({marks})", rows
                )
            if fails:
                marks = ",".join("?" * len(FAILURE_COLUMNS))
                self._con.executemany(
                    f"INSERT INTO failures ({','.join(FAILURE_COLUMNS)}) VALUES ({marks})", fails
                )
            self._con.commit()

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._con.close()


# --------------------------------------------------------------------------- metrics

_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(_LATENCY_BUCKETS_S)
        self.total = 0
        self.sum = 0.0

    def observe(self, v: float) -> None:
        self.total += 1
        self.sum += v
        for i, le in enumerate(_LATENCY_BUCKETS_S):
            if v <= le:
                self.counts[i] += 1
                break


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Prometheus metrics of the gateway, rendered as text exposition format 0.0.4."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.latency: dict[str, _Histogram] = defaultdict(_Histogram)
        self.ttft: dict[str, _Histogram] = defaultdict(_Histogram)
        self.switch_wait: dict[str, _Histogram] = defaultdict(_Histogram)
        self.wakes: dict[str, int] = defaultdict(int)
        self.wake_failures: dict[str, int] = defaultdict(int)
        self.restarts: dict[str, int] = defaultdict(int)

    def render(self, gw: Gateway) -> str:
        out: list[str] = []

        def counter(name: str, doc: str, label: str, data: dict) -> None:
            out.append(f"# HELP {name} {doc}\n# TYPE {name} counter")
            for k, v in sorted(data.items()):
                out.append(f'{name}{{{label}="{_label(k)}"}} {v}')

        def gauge(name: str, doc: str, data: dict[str, float]) -> None:
            out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge")
            for k, v in sorted(data.items()):
                out.append(f'{name}{{model="{_label(k)}"}} {v}')

        def hist(name: str, doc: str, data: dict[str, _Histogram]) -> None:
            out.append(f"# HELP {name} {doc}\n# TYPE {name} histogram")
            for model, h in sorted(data.items()):
                m = _label(model)
                acc = 0
                for le, c in zip(_LATENCY_BUCKETS_S, h.counts, strict=True):
                    acc += c
                    out.append(f'{name}_bucket{{model="{m}",le="{le}"}} {acc}')
                out.append(f'{name}_bucket{{model="{m}",le="+Inf"}} {h.total}')
                out.append(f'{name}_sum{{model="{m}"}} {h.sum:.6f}')
                out.append(f'{name}_count{{model="{m}"}} {h.total}')

        out.append(
            "# HELP planner_gateway_requests_total Requests by model and HTTP status.\n"
            "# TYPE planner_gateway_requests_total counter"
        )
        for (model, status), v in sorted(self.requests.items()):
            out.append(
                f'planner_gateway_requests_total{{model="{_label(model)}",status="{status}"}} {v}'
            )
        hist("planner_gateway_request_latency_seconds", "Arrival to last byte.", self.latency)
        hist("planner_gateway_ttft_seconds", "Arrival to first byte from the engine.", self.ttft)
        hist(
            "planner_gateway_switch_wait_seconds",
            "Time requests waited for a wake.",
            self.switch_wait,
        )
        counter("planner_gateway_wakes_total", "Completed wakes by model.", "model", self.wakes)
        counter(
            "planner_gateway_wake_failures_total",
            "Failed wakes by model.",
            "model",
            self.wake_failures,
        )
        counter(
            "planner_gateway_restarts_total", "Health-loop restarts.", "instance", self.restarts
        )
        models = sorted(gw.by_model)
        gauge(
            "planner_gateway_awake_instances",
            "Awake instances by model.",
            {m: sum(i.status == "awake" for i in gw.by_model[m]) for m in models},
        )
        gauge(
            "planner_gateway_outstanding_requests",
            "Requests being served by model.",
            {m: sum(i.outstanding for i in gw.by_model[m]) for m in models},
        )
        gauge(
            "planner_gateway_queued_requests",
            "Requests waiting for a wake by model.",
            {m: gw.waiting[m] for m in models},
        )
        return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- gateway


def _usage_of(obj: Any) -> dict | None:
    u = obj.get("usage") if isinstance(obj, dict) else None
    return u if isinstance(u, dict) else None


class Gateway:
    """The proxy's state and handlers; `serve()` runs it."""

    def __init__(
        self,
        point: Point,
        control: InstanceControl,
        *,
        state_dir: str | Path,
        config: GatewayConfig | None = None,
    ):
        self.point = point
        self.control = control
        self.cfg = config or GatewayConfig()
        self.instances: dict[str, _Inst] = {}
        self.by_model: dict[str, list[_Inst]] = defaultdict(list)
        self._set_point(point)
        self.waiting: dict[str, int] = defaultdict(int)
        self.metrics = Metrics()
        self.log = RequestLog(Path(state_dir) / REQUEST_LOG)
        self._wakes: dict[str, asyncio.Task] = {}
        self._wake_s: dict[str, float] = {}  # last measured wake time per model
        self._gpu_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._pool = ThreadPoolExecutor(self.cfg.control_threads, thread_name_prefix="control")
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task] = []

    # ----- life cycle

    async def start(self) -> None:
        """Open the backend session, read the instances' status, start the loops."""
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=self.cfg.request_timeout_s),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # one user's cookies must never reach another's
        )
        await self.refresh()
        self._tasks = [
            asyncio.create_task(self._health_loop()),
            asyncio.create_task(self._flush_loop()),
        ]

    async def close(self) -> None:
        """Stop the loops, close the session, flush the log."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self._session is not None:
            await self._session.close()
        await asyncio.get_running_loop().run_in_executor(self._pool, self.log.close)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def refresh(self) -> None:
        """Take status and handles from the controller (at start; after external changes)."""
        st = await self._call(self.control.status)
        for iid, inst in self.instances.items():
            status, handle = st.get(iid, ("stopped", None))
            inst.status, inst.handle = status, handle
            inst.want_awake = inst.spec.tier == "gpu" or status == "awake"

    def _set_point(self, point: Point) -> None:
        """Route by `point`: instances kept by id take the new spec (tier), others come or go."""
        self.point = point
        old, self.instances = self.instances, {}
        self.by_model = defaultdict(list)
        for spec in point.instances:
            inst = old.get(spec.id)
            if inst is None:
                inst = _Inst(spec=spec, _status="stopped", handle=None)
                inst.idle.set()
            else:
                inst.spec = spec
                inst.want_awake = spec.tier == "gpu" or inst.status == "awake"
            self.instances[spec.id] = inst
            self.by_model[spec.model].append(inst)

    def app(self) -> web.Application:
        """The aiohttp application with every route."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/v1/models", self.h_models)
        app.router.add_get("/health", self.h_health)
        app.router.add_get("/metrics", self.h_metrics)
        for path in _PROXIED:
            app.router.add_post(path, self.h_proxy)
        return app

    # ----- routing and waking

    async def pick(self, model: str) -> _Inst:
        """The awake instance of `model` with the fewest outstanding requests; wakes one if none."""
        for _ in range(3):
            ready = [i for i in self.by_model[model] if i.routable()]
            if ready:
                return min(ready, key=lambda i: i.outstanding)
            await self._await_wake(model)
        raise Unavailable(f"model {model!r} did not stay awake", self._retry_after(model))

    def _retry_after(self, model: str) -> float:
        return self._wake_s.get(model, self.cfg.retry_after_s)

    async def _await_wake(self, model: str) -> None:
        if self.waiting[model] >= self.cfg.queue_limit:
            raise Unavailable(
                f"model {model!r} is waking and {self.waiting[model]} requests already wait "
                f"(queue limit {self.cfg.queue_limit})",
                self._retry_after(model),
            )
        task = self._wakes.get(model)
        if task is None:
            task = asyncio.create_task(self._wake_model(model))
            self._wakes[model] = task

            def _done(t: asyncio.Task, model: str = model) -> None:
                if self._wakes.get(model) is t:
                    del self._wakes[model]
                if not t.cancelled():
                    t.exception()  # retrieved here; each waiter gets it through shield

            task.add_done_callback(_done)
        self.waiting[model] += 1
        try:
            await asyncio.shield(task)
        finally:
            self.waiting[model] -= 1

    @contextlib.asynccontextmanager
    async def _gpus(self, spec: Instance):
        """Hold the locks of the instance's GPUs (sorted order: no deadlock between wakes)."""
        keys = sorted((spec.node, g) for g in spec.gpus)
        locks = [self._gpu_locks.setdefault(k, asyncio.Lock()) for k in keys]
        async with contextlib.AsyncExitStack() as stack:
            for lk in locks:
                await stack.enter_async_context(lk)
            yield

    def _choose(self, model: str) -> _Inst:
        """Which sleeping instance to wake: the one whose co-tenants are least busy."""

        def cost(i: _Inst) -> tuple[int, int, int]:
            busy = [
                c
                for c in self.instances.values()
                if c is not i and c.status == "awake" and overlaps(c.spec, i.spec)
            ]
            return (i.status == "failed", sum(c.outstanding for c in busy), len(busy))

        return min(self.by_model[model], key=cost)

    async def _wake_model(self, model: str) -> None:
        target = self._choose(model)
        t0 = time.perf_counter()
        async with self._gpus(target.spec):
            if target.routable():
                return
            try:
                await self._evict_cotenants(target)
                handle = await self._call(
                    self.control.wake, target.spec.id, self.cfg.wake_timeout_s
                )
            except Exception as e:
                self.metrics.wake_failures[model] += 1
                target.status = "failed"
                target.want_awake = target.spec.tier == "gpu"
                log.warning("wake of %s failed: %s", target.spec.id, e)
                raise Unavailable(
                    f"could not wake {target.spec.id}: {e}", self._retry_after(model)
                ) from e
            target.status, target.handle, target.want_awake = "awake", handle, True
            target.timeouts = 0
        self._wake_s[model] = time.perf_counter() - t0
        self.metrics.wakes[model] += 1

    async def _evict_cotenants(self, target: _Inst) -> None:
        """Drain and sleep the awake host/disk-tier instances sharing a GPU with `target`."""
        cot = [
            c
            for c in self.instances.values()
            if c is not target
            and c.spec.tier != "gpu"
            and c.status == "awake"
            and overlaps(c.spec, target.spec)
        ]
        if not cot:
            return
        for c in cot:
            c.draining = True
        try:
            waits = [asyncio.create_task(c.idle.wait()) for c in cot]
            _, pending = await asyncio.wait(waits, timeout=self.cfg.drain_timeout_s)
            for t in pending:
                t.cancel()
            for c in cot:
                if c.outstanding:
                    log.warning("sleeping %s with %d requests in flight", c.spec.id, c.outstanding)
                await self._call(self.control.sleep, c.spec.id)
                c.status, c.handle, c.want_awake = "asleep", None, False
        finally:
            for c in cot:
                c.draining = False

    # ----- health

    async def _health_loop(self) -> None:
        n = 0
        while True:
            await asyncio.sleep(self.cfg.health_interval_s)
            n += 1
            if n % self.cfg.adopt_every == 0:
                try:
                    await self._adopt()
                except Exception as e:
                    log.warning("reading the controller's status: %s", e)
            for inst in list(self.instances.values()):
                try:
                    await self._check(inst)
                except Exception as e:  # one instance's trouble must not stop the loop
                    log.warning("health check of %s: %s", inst.spec.id, e)

    async def _adopt(self) -> None:
        """Follow the point in force; take over instances that became awake outside the
        gateway (e.g. `planner apply`)."""
        follow = getattr(self.control, "follow", None)
        if follow is not None:
            point = await self._call(follow)
            if point.name != self.point.name:
                log.info("following point %s (was %s)", point.name, self.point.name)
                self._set_point(point)
        epochs = {iid: i.epoch for iid, i in self.instances.items()}
        st = await self._call(self.control.status)
        for iid, inst in self.instances.items():
            status, handle = st.get(iid, ("stopped", None))
            busy = inst.spec.model in self._wakes or inst.draining or inst.epoch != epochs[iid]
            if status == "awake" and handle is not None and not inst.routable() and not busy:
                inst.status, inst.handle, inst.want_awake = "awake", handle, True

    async def _probe(self, inst: _Inst) -> bool | None:
        """True: healthy; False: dead; None: no answer in time (busy or hung)."""
        assert self._session is not None
        try:
            async with self._session.get(
                inst.url + "/health",
                timeout=aiohttp.ClientTimeout(total=self.cfg.health_timeout_s),
            ) as r:
                return r.status == 200
        except TimeoutError:
            return None
        except aiohttp.ClientError:
            return False

    async def _check(self, inst: _Inst) -> None:
        """Probe one instance that should be awake; restart it after its backoff if dead."""
        if not inst.want_awake or inst.draining or inst.spec.model in self._wakes:
            return
        if inst.status == "awake" and inst.handle is not None:
            epoch = inst.epoch
            ok = await self._probe(inst)
            if inst.epoch != epoch or inst.draining or not inst.want_awake:
                return  # put to sleep or restarted meanwhile: the answer is about the old one
            if ok is None:
                inst.timeouts += 1
                if inst.timeouts < 3:
                    return
            elif ok:
                inst.timeouts = inst.failures = 0
                return
            log.warning("instance %s is dead", inst.spec.id)
            inst.status, inst.timeouts = "failed", 0
            inst.failures += 1
            inst.next_restart_at = time.monotonic() + self._backoff(inst)
        if time.monotonic() < inst.next_restart_at:
            return
        async with self._gpus(inst.spec):
            if inst.routable() or not inst.want_awake:  # a wake or a sleep came first
                return
            try:
                await self._evict_cotenants(inst)
                handle = await self._call(self.control.wake, inst.spec.id, self.cfg.wake_timeout_s)
            except Exception as e:
                inst.failures += 1
                inst.status = "failed"
                inst.next_restart_at = time.monotonic() + self._backoff(inst)
                log.warning(
                    "restart of %s failed (%d in a row): %s", inst.spec.id, inst.failures, e
                )
                return
            # `failures` stays until a probe finds it healthy: a crash loop keeps backing off.
            inst.status, inst.handle = "awake", handle
            self.metrics.restarts[inst.spec.id] += 1

    def _backoff(self, inst: _Inst) -> float:
        return min(self.cfg.backoff_cap_s, self.cfg.backoff_base_s * 2 ** max(0, inst.failures - 1))

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.log_flush_s)
            if self.log.pending():
                await self._call(self.log.flush)

    # ----- handlers

    async def h_models(self, request: web.Request) -> web.Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "planner"}
            for m in sorted(self.by_model)
        ]
        return web.json_response({"object": "list", "data": data})

    async def h_health(self, request: web.Request) -> web.Response:
        inst = {
            i.spec.id: {"model": i.spec.model, "status": i.status, "outstanding": i.outstanding}
            for i in self.instances.values()
        }
        return web.json_response({"status": "ok", "instances": inst})

    async def h_metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=self.metrics.render(self), content_type="text/plain", charset="utf-8"
        )

    def _error(
        self, status: int, message: str, kind: str, *, headers: dict | None = None, **extra: Any
    ) -> web.Response:
        body = {"error": {"message": message, "type": kind, "code": status, **extra}}
        return web.json_response(body, status=status, headers=headers)

    def _fail(self, t_arr: float, user: str, session: str, model: str, status: int,
              latency_s: float, wait_s: float, error: str) -> None:  # fmt: skip
        # Unknown names share one label: clients must not grow the metric without bound.
        label = model if model in self.by_model else "(unknown)"
        self.metrics.requests[(label, status)] += 1
        self.log.add_failure((t_arr, user, session, model, status, latency_s, wait_s, error))

    async def h_proxy(self, request: web.Request) -> web.StreamResponse:
        t_arr = time.time()
        t0 = time.perf_counter()
        user, session = identity(request.headers)
        body = await request.read()
        try:
            payload = json.loads(body)
        except ValueError:
            return self._error(400, "the body is not JSON", "BadRequestError")
        model = payload.get("model") if isinstance(payload, dict) else None
        if not isinstance(model, str) or not model:
            return self._error(400, "the body names no `model`", "BadRequestError")
        if model not in self.by_model:
            names = sorted(self.by_model)
            self._fail(
                t_arr, user, session, model, 404, time.perf_counter() - t0, 0.0, "unknown model"
            )
            return self._error(
                404, f"model {model!r} is not served here; models: {names}", "NotFoundError",
                models=names,
            )  # fmt: skip
        stream = bool(payload.get("stream"))
        strip_usage = False
        if stream:
            opts = payload.get("stream_options") or {}
            if not opts.get("include_usage"):
                payload["stream_options"] = {**opts, "include_usage": True}
                body = json.dumps(payload).encode()
                strip_usage = True

        t_pick = time.perf_counter()
        for attempt in range(2):
            try:
                inst = await self.pick(model)
            except Unavailable as e:
                wait = time.perf_counter() - t_pick
                self._fail(t_arr, user, session, model, 503, time.perf_counter() - t0, wait, str(e))
                return self._error(
                    503, str(e), "ServiceUnavailableError",
                    headers={"Retry-After": str(max(1, math.ceil(e.retry_after_s)))},
                )  # fmt: skip
            wait_s = time.perf_counter() - t_pick
            try:
                return await self._forward(
                    request, inst, body, stream, strip_usage, (t_arr, t0, wait_s, user, session)
                )
            except _NoAnswer as e:
                # No byte of an answer came back. If the engine is gone, mark it dead (the
                # next pick restarts it) and retry once; a live one that failed: 502.
                log.warning("instance %s gave no answer: %s", inst.spec.id, e)
                dead = inst.handle is None or (
                    not isinstance(e.__cause__, TimeoutError) and not await self._probe(inst)
                )
                if dead and inst.status == "awake":
                    inst.status = "failed"
                if attempt or not dead:
                    msg = f"instance {inst.spec.id} is unreachable: {e}"
                    self._fail(
                        t_arr, user, session, model, 502, time.perf_counter() - t0, wait_s, msg
                    )
                    return self._error(502, msg, "BadGatewayError")
        raise AssertionError("unreachable")

    async def _forward(
        self,
        request: web.Request,
        inst: _Inst,
        body: bytes,
        stream: bool,
        strip_usage: bool,
        ctx: tuple[float, float, float, str, str],
    ) -> web.StreamResponse:
        """Send the request to one instance and pass its answer through; log it."""
        t_arr, t0, wait_s, user, session = ctx
        model = inst.spec.model
        if wait_s > 0.001:  # only requests that waited for a wake
            self.metrics.switch_wait[model].observe(wait_s)
        inst.outstanding += 1
        inst.idle.clear()
        usage: dict | None = None
        ttft_s: float | None = None
        status = 502
        resp: web.StreamResponse | None = None
        try:
            assert self._session is not None
            async with self._session.post(
                _url(inst.url + request.path),
                data=body,
                headers={"Content-Type": "application/json"},
            ) as up:
                status = up.status
                ctype = up.headers.get("Content-Type", "application/json")
                if not (stream and status == 200 and ctype.startswith("text/event-stream")):
                    data = await up.read()
                    ttft_s = time.perf_counter() - t0
                    if status == 200:
                        with contextlib.suppress(ValueError):
                            usage = _usage_of(json.loads(data))
                    resp = web.Response(body=data, status=status, content_type=ctype.split(";")[0])
                else:
                    resp = web.StreamResponse(
                        status=200,
                        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
                    )
                    await resp.prepare(request)
                    sse = SseUsage(strip_usage)
                    async for chunk in up.content.iter_any():
                        if ttft_s is None:
                            ttft_s = time.perf_counter() - t0
                        out = sse.feed(chunk)
                        if out:
                            await resp.write(out)
                    out = sse.close()
                    if out:
                        await resp.write(out)
                    usage = sse.usage
                    await resp.write_eof()
        except aiohttp.ClientConnectionError as e:
            if resp is None:
                raise _NoAnswer(str(e) or type(e).__name__) from e
            msg = f"instance {inst.spec.id} failed: {e or type(e).__name__}"
            self._fail(t_arr, user, session, model, 502, time.perf_counter() - t0, wait_s, msg)
            return resp if resp.prepared else self._error(502, msg, "BadGatewayError")
        except (aiohttp.ClientError, TimeoutError) as e:
            msg = f"instance {inst.spec.id} failed: {e or type(e).__name__}"
            self._fail(t_arr, user, session, model, 502, time.perf_counter() - t0, wait_s, msg)
            if resp is not None and resp.prepared:
                return resp
            return self._error(502, msg, "BadGatewayError")
        except (ConnectionResetError, asyncio.CancelledError):
            self._fail(
                t_arr, user, session, model, 499, time.perf_counter() - t0, wait_s, "client gone"
            )
            raise
        finally:
            inst.outstanding -= 1
            if inst.outstanding == 0:
                inst.idle.set()

        latency_s = time.perf_counter() - t0
        if status != 200:
            self._fail(t_arr, user, session, model, status, latency_s, wait_s, "engine error")
            return resp
        self.metrics.requests[(model, 200)] += 1
        self.metrics.latency[model].observe(latency_s)
        if ttft_s is not None:
            self.metrics.ttft[model].observe(ttft_s)
        u = usage or {}
        details = u.get("prompt_tokens_details") or {}
        n_in = max(1, int(u.get("prompt_tokens") or 0))
        cached = min(n_in, int(details.get("cached_tokens") or 0))
        self.log.add((
            t_arr, user, session, model, n_in, max(1, int(u.get("completion_tokens") or 0)),
            cached, ttft_s, latency_s, wait_s, 200, inst.spec.id,
        ))  # fmt: skip
        return resp


class SseUsage:
    """Passes an SSE byte stream through, reading (and optionally dropping) usage chunks.

    Bytes are held only up to the last complete event (blank line); blocks without the
    text `"usage"` pass without parsing.
    """

    def __init__(self, strip: bool):
        self.strip = strip
        self.usage: dict | None = None
        self._buf = b""

    def feed(self, chunk: bytes) -> bytes:
        """Bytes to send on, for `chunk` just received."""
        buf = self._buf + chunk
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._buf = buf
            return b""
        out, self._buf = buf[: end + 2], buf[end + 2 :]
        return self._scan(out) if b'"usage"' in out else out

    def close(self) -> bytes:
        """What is left at the end of the stream."""
        out, self._buf = self._buf, b""
        return self._scan(out) if b'"usage"' in out else out

    def _scan(self, block: bytes) -> bytes:
        kept = []
        for ev in block.split(b"\n\n"):
            if b'"usage"' in ev and ev.startswith(b"data: {"):
                try:
                    obj = json.loads(ev[6:])
                except ValueError:
                    obj = None
                u = _usage_of(obj)
                if u is not None:
                    self.usage = u
                    if self.strip and not obj.get("choices"):
                        continue
            kept.append(ev)
        return b"\n\n".join(kept)


# --------------------------------------------------------------------------- serving


async def serve(
    gateway: Gateway, host: str, port: int, stop: asyncio.Event, ready: Any = None
) -> None:
    """Run the gateway until `stop` is set; then finish in-flight requests and close."""
    runner = web.AppRunner(gateway.app(), access_log=None, handle_signals=False)
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
