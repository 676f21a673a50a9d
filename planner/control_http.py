"""Every synchronous control call the planner sends an engine: one client, one timeout table,
one error message.

Control calls are readiness polls, health and is-sleeping checks, sleep and wake (apply,
status, adjust, the gateway's controller through a backend, a Ray node's agent) and the
profiler's sleep/wake timings and metrics. The gateway's data path keeps its own async client
(adjuster/gateway/upstream.py and http1.py; docs/architecture.md, "HTTP clients"), and the
profiler's timed completions keep theirs: those are measurement traffic.

On the standard library's `http.client`: `apply`, `status` and `adjust` need no extra, the CLI
pays no import at start-up, and no proxy variable of the environment (which urllib and httpx
honour) can send a loopback call elsewhere. A test checks that no other module of the package
imports an HTTP client for such calls (tests/unit/test_control_http.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from planner.errors import ControlCallError

Purpose = Literal["probe", "health", "metrics", "sleep", "wake"]

# seconds one call may take, by what it is for
TIMEOUTS_S: dict[str, float] = {
    "probe": 2.0,  # readiness polls: many in a row, each short
    "health": 5.0,  # is the server healthy, is it asleep
    "metrics": 10.0,  # the metrics text (the profiler reads the KV capacity there)
    "sleep": 600.0,  # moving the weights out of GPU memory: minutes on a large model
    "wake": 600.0,  # moving them back, or reloading them after a level-2 sleep
}

_SNIPPET_CHARS = 200  # of an unexpected answer's body, in the error message


def auth_headers(secret: str) -> dict[str, str]:
    """The header that passes the engine's API-key check (none without a secret)."""
    return {"Authorization": f"Bearer {secret}"} if secret else {}


def describe(method: str, host: str, port: int, route: str, cause: str) -> str:
    """The one wording of a failed control call: what was asked, of which server, and why."""
    return f"{method} {route} on {host}:{port} failed: {cause}"


@dataclass(frozen=True)
class Reply:
    """An engine's answer to one control call."""

    method: str
    host: str
    port: int
    route: str
    status: int
    body: bytes

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        """The body as JSON (ValueError when it is not)."""
        return json.loads(self.body)

    def require_ok(self, who: str = "") -> Reply:
        """This reply when it is a 200; else ControlCallError naming the call, the status and
        the start of the body (`who`: the instance, put in front)."""
        if self.ok:
            return self
        snippet = " ".join(self.text.split())[:_SNIPPET_CHARS]
        cause = f"answered {self.status}" + (f" ({snippet})" if snippet else "")
        message = describe(self.method, self.host, self.port, self.route, cause)
        raise ControlCallError(
            f"{who}: {message}" if who else message, cause=cause, status=self.status
        )


def request(
    method: str,
    host: str,
    port: int,
    route: str,
    *,
    purpose: Purpose,
    secret: str = "",
    body: dict[str, Any] | None = None,
    timeout_s: float | None = None,
) -> Reply:
    """Send one control call and read the whole answer, whatever its status.

    `timeout_s`: overrides the purpose's entry of TIMEOUTS_S. Raises ControlCallError when
    no answer comes (refused, reset, timed out, not HTTP).
    """
    import http.client

    timeout = TIMEOUTS_S[purpose] if timeout_s is None else timeout_s
    headers = auth_headers(secret)
    data = b""
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, route, body=data if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        return Reply(method, host, port, route, resp.status, resp.read())
    except (OSError, http.client.HTTPException, ValueError) as e:
        cause = _cause(e, timeout)
        raise ControlCallError(describe(method, host, port, route, cause), cause=cause) from e
    finally:
        conn.close()


def get(
    host: str,
    port: int,
    route: str,
    *,
    purpose: Purpose,
    secret: str = "",
    timeout_s: float | None = None,
) -> Reply:
    """GET `route` (see `request`)."""
    return request("GET", host, port, route, purpose=purpose, secret=secret, timeout_s=timeout_s)


def post(
    host: str,
    port: int,
    route: str,
    *,
    purpose: Purpose,
    secret: str = "",
    body: dict[str, Any] | None = None,
    timeout_s: float | None = None,
) -> Reply:
    """POST an empty body, or `body` as JSON (see `request`)."""
    return request(
        "POST", host, port, route, purpose=purpose, secret=secret, body=body, timeout_s=timeout_s
    )


def answers_ok(
    host: str,
    port: int,
    route: str,
    *,
    purpose: Purpose = "probe",
    secret: str = "",
    timeout_s: float | None = None,
) -> bool:
    """Whether GET `route` answers 200 now; False on any failure (polls and health checks)."""
    try:
        return get(host, port, route, purpose=purpose, secret=secret, timeout_s=timeout_s).ok
    except ControlCallError:
        return False


def _cause(e: BaseException, timeout_s: float) -> str:
    """A short reason a call got no answer, for the message."""
    if isinstance(e, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(e, ConnectionResetError):
        return "connection reset by the server"
    if isinstance(e, OSError):
        return e.strerror or str(e) or type(e).__name__
    return f"no valid HTTP answer ({type(e).__name__}: {e})" if str(e) else type(e).__name__
