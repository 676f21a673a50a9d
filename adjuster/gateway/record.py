"""What the gateway keeps of each proxied request: /metrics, the request log, the access log.

Every request ends here once: answered by an engine (`done`: a `requests` row) or not
(`fail`: a `failures` row, with the status it got). Unknown model names share one metrics
label, so clients cannot grow /metrics without bound.

An outcome is noted when the request ends and counted and logged by `settle`, in the order
they came: at each request-log flush, before /metrics is rendered or the moving latency read,
at close, and every `SETTLE_EVERY` outcomes. The figures and rows are the same; what moves is
when the work runs. At one client the gateway sleeps between a request and its answer, and
what a request runs after a wake runs with cold caches; counting, the usage parse and the
rows of a request took a fifth of its CPU there (issue 43: 0.58 -> 0.46 ms at one client
without them, against a stub engine answering in 20 ms), and a batch of them runs warm.
"""

from __future__ import annotations

from planner.adjuster.gateway.accesslog import AccessEntry, AccessLog
from planner.adjuster.gateway.clock import Clock
from planner.adjuster.gateway.h1server import Request
from planner.adjuster.gateway.metrics import Metrics
from planner.adjuster.gateway.pool import Inst, Pool
from planner.adjuster.gateway.reply import StreamResponse
from planner.adjuster.gateway.requestlog import FailureRow, LogRow, RequestLog
from planner.adjuster.gateway.sse import tokens, usage_in

_FAILED, _ANSWERED, _UNKEYED = "failed", "answered", "unkeyed"  # kinds of outcome
SETTLE_EVERY = 256  # outcomes noted before `settle` runs at once (it also runs on a timer)
USAGE_LATER_BYTES = 64 * 1024  # an answer up to this is kept for `settle` to read its usage


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
        self._latency_s: dict[str, float] = {}  # moving average per model (Retry-After)
        # outcomes not yet settled: (_FAILED, r, status, latency_s, message), (_ANSWERED, r,
        # instance id, ttft_s, latency_s, usage: maybe the answer's text), (_UNKEYED, route,
        # timestamp)
        self._noted: list[tuple] = []

    def start(self, user: str, session: str, request: Request) -> RequestRecord:
        r = RequestRecord(user, session, request.path, self.clock.now_s(), self.clock.mono_s())
        r.request = request
        return r

    def since_s(self, r: RequestRecord) -> float:
        """Seconds since the request arrived."""
        return self.clock.mono_s() - r.t0

    def latency_s(self, model: str) -> float | None:
        """The moving average of the model's answered requests' latency, s (None: none yet)."""
        self.settle()
        return self._latency_s.get(model)

    def fail(self, r: RequestRecord, status: int, msg: str) -> None:
        """A request no engine answered (or whose engine failed): counted and logged."""
        self._note((_FAILED, r, status, self.since_s(r), msg))

    def unkeyed(self, route: str) -> None:
        """A request refused on its head for want of a valid key: an access-log line."""
        if self.access is not None:
            self._note((_UNKEYED, route, self.clock.now_s()))

    def done(
        self,
        r: RequestRecord,
        inst: Inst,
        status: int,
        ttft_s: float | None,
        usage: dict | bytes | None,
    ) -> None:
        """An answered request: counted and logged (a status other than 200: `fail`).
        `usage`: its usage object, or the whole answer's text to read it from."""
        if status != 200:
            self.fail(r, status, "engine error")
            return
        if isinstance(usage, bytes) and len(usage) > USAGE_LATER_BYTES:
            usage = usage_in(usage)  # (a long answer is not kept until `settle`)
        noted = self._noted  # (what `_note` does, without its call: the common case)
        noted.append((_ANSWERED, r, inst.spec.id, ttft_s, self.clock.mono_s() - r.t0, usage))
        if len(noted) >= SETTLE_EVERY:
            self.settle()

    def _note(self, outcome: tuple) -> None:
        noted = self._noted
        noted.append(outcome)
        if len(noted) >= SETTLE_EVERY:
            self.settle()

    def settle(self) -> None:
        """Count and log the outcomes noted since the last call, in the order they came."""
        noted, self._noted = self._noted, []
        for kind, *outcome in noted:
            if kind is _ANSWERED:
                r, iid, ttft_s, latency_s, usage = outcome
                if isinstance(usage, bytes):
                    usage = usage_in(usage)
                self._answered(r, iid, ttft_s, latency_s, usage)
            elif kind is _FAILED:
                self._failed(*outcome)
            elif self.access is not None:
                route, timestamp = outcome
                self.access.add(
                    AccessEntry(timestamp, "", "", route, 401, 0.0, 0.0, 0, 0, "", "no valid key")
                )

    def _failed(self, r: RequestRecord, status: int, latency_s: float, msg: str) -> None:
        label = r.model if r.model in self.pool.by_model else "(unknown)"
        self.metrics.requests[(label, status)] += 1
        self.log.add_failure(
            FailureRow(r.t_arr, r.user, r.session, r.model, status, latency_s, r.wait_s, msg)
        )
        if self.access is not None:
            self.access.add(
                AccessEntry(
                    r.t_arr, r.user, r.model, r.route, status, r.wait_s, latency_s, 0, 0, "", msg
                )
            )

    def _answered(
        self,
        r: RequestRecord,
        iid: str,
        ttft_s: float | None,
        latency_s: float,
        usage: dict | None,
    ) -> None:
        model, m = r.model, self.metrics
        m.requests[(model, 200)] += 1
        if r.served_by:
            m.substitutions[(model, r.served_by)] += 1
        m.latency[model].observe(latency_s)
        if r.wait_s > 0.001:  # only requests that waited for a wake
            m.switch_wait[model].observe(r.wait_s)
        if ttft_s is not None:
            m.ttft[model].observe(ttft_s)
        prev = self._latency_s.get(model)
        self._latency_s[model] = latency_s if prev is None else 0.9 * prev + 0.1 * latency_s
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
                iid,
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
