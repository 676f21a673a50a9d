"""What the gateway keeps of each proxied request: /metrics, the request log, the access log.

Every request ends here once: answered by an engine (`done`: a `requests` row) or not
(`fail`: a `failures` row, with the status it got). Unknown model names share one metrics
label, so clients cannot grow /metrics without bound.
"""

from __future__ import annotations

from planner.adjuster.gateway.accesslog import AccessEntry, AccessLog
from planner.adjuster.gateway.clock import Clock
from planner.adjuster.gateway.h1server import Request
from planner.adjuster.gateway.metrics import Metrics
from planner.adjuster.gateway.pool import Inst, Pool
from planner.adjuster.gateway.reply import StreamResponse
from planner.adjuster.gateway.requestlog import FailureRow, LogRow, RequestLog
from planner.adjuster.gateway.sse import tokens


class RequestRecord:
    """One request's bookkeeping, from arrival to its log row."""

    __slots__ = (
        "early",
        "model",
        "request",
        "route",
        "served_by",
        "session",
        "stream",
        "t0",
        "t_arr",
        "user",
        "wait_s",
    )

    def __init__(self, user: str, session: str, route: str, t_arr: float, t0: float) -> None:
        self.t_arr = t_arr  # epoch seconds (the log's timestamp)
        self.t0 = t0  # Clock.mono_s() at arrival (latencies)
        self.user = user
        self.session = session
        self.route = route
        self.model = ""
        self.served_by = ""  # the stand-in that answered ("": the model itself)
        self.wait_s = 0.0  # time waiting for a wake, s
        self.request: Request | None = None
        self.stream = False
        self.early: StreamResponse | None = None  # a stream begun while waiting


class Recorder:
    """Counts and logs each request's outcome; keeps each model's latency (Retry-After)."""

    def __init__(
        self,
        pool: Pool,
        metrics: Metrics,
        log: RequestLog,
        clock: Clock,
        access: AccessLog | None = None,
    ):
        self.pool = pool
        self.metrics = metrics
        self.log = log
        self.clock = clock
        self.access = access
        self.latency_s: dict[str, float] = {}  # moving average per model (Retry-After)

    def start(self, user: str, session: str, request: Request) -> RequestRecord:
        r = RequestRecord(user, session, request.path, self.clock.now_s(), self.clock.mono_s())
        r.request = request
        return r

    def since_s(self, r: RequestRecord) -> float:
        """Seconds since the request arrived."""
        return self.clock.mono_s() - r.t0

    def fail(self, r: RequestRecord, status: int, msg: str) -> None:
        """A request no engine answered (or whose engine failed): counted and logged."""
        label = r.model if r.model in self.pool.by_model else "(unknown)"
        self.metrics.requests[(label, status)] += 1
        latency_s = self.since_s(r)
        self.log.add_failure(
            FailureRow(r.t_arr, r.user, r.session, r.model, status, latency_s, r.wait_s, msg)
        )
        if self.access is not None:
            self.access.add(
                AccessEntry(
                    r.t_arr, r.user, r.model, r.route, status, r.wait_s, latency_s, 0, 0, "", msg
                )
            )

    def done(
        self, r: RequestRecord, inst: Inst, status: int, ttft_s: float | None, usage: dict | None
    ) -> None:
        """An answered request: counted and logged (a status other than 200: `fail`)."""
        if status != 200:
            self.fail(r, status, "engine error")
            return
        latency_s = self.clock.mono_s() - r.t0
        model, m = r.model, self.metrics
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
        self.log.add(
            LogRow(
                r.t_arr,
                r.user,
                r.session,
                model,
                n_in,
                n_out,
                cached,
                ttft_s,
                latency_s,
                r.wait_s,
                200,
                inst.spec.id,
                r.served_by,
                int(bool(r.served_by)),
            )
        )
        if self.access is not None:
            self.access.add(
                AccessEntry(
                    r.t_arr,
                    r.user,
                    model,
                    r.route,
                    200,
                    r.wait_s,
                    latency_s,
                    n_in,
                    n_out,
                    r.served_by,
                    "",
                )
            )
