"""The OpenAI-compatible gateway: routes by `model`, wakes sleeping models, logs requests.

One HTTP/1.1 server in front of the applied point's vLLM instances, in modules by job:
`server` (the parts wired together, life cycle), `run` (serving: CLI, a thread for tests),
`h1server` (the server's connections and requests, parsed by httptools; the gate on each
head), `h1body` (a body as it arrives, the body budget), `reply` (the answers it writes),
`config` (knobs), `clock` (the one source of time), `routes` (GET routes, 404/405),
`proxy` (a proxied request: admission, instance choice, retries, client disconnects),
`forward` (HTTP and streaming pass-through), `http1` (the lean client of non-streamed
requests), `record` (each request's metrics and log rows), `upstream` (the engines'
session, controller calls, `planner down`), `auth` (keys, per-key limits, who may read
what), `answers` (caller identity without keys, JSON error answers), `body` (reading and
checking a body), `sse` (the usage chunk of a stream), `stream` (writing to a client),
`waker` (wake/evict scheduling), `health` (probes, restarts, following apply), `tiers`
(awake hours, idle sleeps), `pool` (the instances' state and admission), `guard` (client
connections), `requestlog` (the SQLite request log), `accesslog` (the optional
line-per-request log) and `metrics` (Prometheus). The choice of instance, of whom to wake
and of whom to evict is `planner.optimizer.serving_rule`'s, shared with the simulator.

The names below are imported on first use: reading the request log (`planner adjust`)
does not load aiohttp.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Gateway": "server",
    "GatewayConfig": "config",
    "GatewayThread": "run",
    "Auth": "auth",
    "Clock": "clock",
    "run_forever": "run",
    "serve": "run",
    "SseUsage": "sse",
    "identity": "answers",
    "Unavailable": "waker",
    "overlaps": "pool",
    "LOG_COLUMNS": "requestlog",
    "LogRow": "requestlog",
    "FailureRow": "requestlog",
    "FAILURE_COLUMNS": "requestlog",
    "REQUEST_LOG": "requestlog",
    "RequestLog": "requestlog",
    "RequestLogSource": "requestlog",
}


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


__all__ = sorted(_EXPORTS)
