"""The gateway's defences against its clients' connections (slow, idle, or too many).

nginx's defaults are the reference: a request's headers must arrive within
`header_timeout_s` (client_header_timeout, 60 s), its body must not pause longer than
`body_timeout_s` between reads (client_body_timeout, 60 s; proxy.py reads the body), and an
idle kept-alive connection closes after `keepalive_timeout_s` (keepalive_timeout, 75 s).
At most `max_connections` connections are open at once, never more than the open-file limit
less a reserve (the engines' connections, the request log); at the cap a new connection
closes the idlest one that holds no request (a slow or idle client), else it is refused. The
soft open-file limit is raised to the hard one at start. The event loop's own errors (an
accept that fails for lack of file descriptors) are logged once per `warn_every_s` per kind,
with a count, not once per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any, Protocol

from planner.adjuster.gateway.clock import SYSTEM

log = logging.getLogger("planner.gateway")

FD_RESERVE = 128  # descriptors kept free of clients: engines, the request log, the loop


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit to the hard one; the soft limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(max_connections: int, open_files: int) -> int:
    """Connections the gateway keeps open at most under an open-file limit."""
    return max(16, min(max_connections, open_files - FD_RESERVE))


class Guarded(Protocol):
    """A client connection as the Guard sees it (h1server.Conn)."""

    busy: bool  # a request is being handled
    header_since: float | None  # first byte of a head not yet whole
    idle_since: float | None  # no request since

    def abort(self) -> None: ...


class Guard:
    """Counts, caps and times out the gateway's client connections."""

    def __init__(
        self,
        cap: int,
        header_timeout_s: float,
        warn_every_s: float = 60.0,
        clock: Callable[[], float] = SYSTEM.mono_s,
        keepalive_timeout_s: float = 75.0,
    ):
        self.cap = cap
        self.keepalive_timeout_s = keepalive_timeout_s
        self.clock = clock  # monotonic seconds
        self.header_timeout_s = header_timeout_s
        self.warn_every_s = warn_every_s
        self.open: dict[Any, None] = {}  # h1server.Conn, in insertion order: oldest first
        self.evicted = 0  # idle connections closed to admit a new one
        self.refused = 0  # connections closed at once: every open one holds a request
        self.timed_out = 0  # connections that sent no whole header in time
        self._warned: dict[str, tuple[float, int]] = {}  # kind -> (last log, suppressed)

    def admit(self, conn: Guarded) -> bool:
        """Whether a new connection may stay open (closing an idle one at the cap)."""
        if len(self.open) >= self.cap:
            idle = next((c for c in self.open if not c.busy), None)
            if idle is None:
                self.refused += 1
                self.warn("refused", "connection cap %d reached, every connection busy", self.cap)
                return False
            self.evicted += 1
            self.forget(idle)
            idle.abort()
        self.open[conn] = None
        return True

    def forget(self, conn: Guarded) -> None:
        self.open.pop(conn, None)

    async def loop(self, every_s: float = 1.0) -> None:
        """Close connections whose headers take longer than `header_timeout_s`, and those
        idle (no request begun) for longer than `keepalive_timeout_s`."""
        while True:
            await asyncio.sleep(every_s)
            self.sweep(self.clock())

    def sweep(self, now: float) -> None:
        head_s, idle_s = self.header_timeout_s, self.keepalive_timeout_s
        for c in list(self.open):
            if c.busy:
                continue
            if c.header_since is not None:  # a head arriving
                if now - c.header_since <= head_s:
                    continue
                self.timed_out += 1
            elif c.idle_since is None or now - c.idle_since <= idle_s:
                continue
            self.forget(c)
            c.abort()

    def warn(self, kind: str, msg: str, *args: Any) -> None:
        """Log `msg` at most once per `warn_every_s` for `kind`, with how many were not."""
        now = self.clock()
        last, quiet = self._warned.get(kind, (-math.inf, 0))
        if now - last < self.warn_every_s:
            self._warned[kind] = (last, quiet + 1)
            return
        self._warned[kind] = (now, 0)
        more = f" ({quiet} more since the last report)" if quiet else ""
        log.warning(msg + more, *args)

    def loop_errors(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The event loop's exception handler: each kind of error once per interval."""
        exc = context.get("exception")
        kind = context.get("message", "") + (f": {type(exc).__name__}" if exc else "")
        self.warn(
            kind, "%s%s", context.get("message", "event loop error"), f" ({exc})" if exc else ""
        )

    @property
    def counts(self) -> dict[str, float]:
        return {
            "open": len(self.open),
            "evicted": self.evicted,
            "refused": self.refused,
            "header_timeouts": self.timed_out,
        }


class QuietFilter(logging.Filter):
    """Passes each distinct message at most once per `every_s`, without its traceback (a
    flood of bad requests must not flood the log)."""

    def __init__(self, every_s: float, clock: Callable[[], float] = SYSTEM.mono_s):
        super().__init__()
        self.every_s, self.clock = every_s, clock
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = record.getMessage()
        now = self.clock()
        if now - self._last.get(key, -math.inf) < self.every_s:
            return False
        self._last[key] = now
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()}: {record.exc_info[1]}".splitlines()[0]
            record.args = None
        record.exc_info = None
        return True


def http_logger(every_s: float, clock: Callable[[], float] = SYSTEM.mono_s) -> logging.Logger:
    """The logger the server's connections report to (quiet: see QuietFilter)."""
    lg = logging.getLogger("planner.gateway.http")
    if not lg.filters:
        lg.addFilter(QuietFilter(every_s, clock))
    return lg
