"""The OpenAI-compatible gateway: routes by `model`, wakes sleeping models, logs requests.

One aiohttp server in front of the applied point's vLLM instances, in modules by job:
`server` (life cycle, routes, running it), `proxy` (HTTP and streaming pass-through,
admission, retries, client disconnects), `auth` (keys, per-key limits, who may read what),
`answers` (caller identity without keys, JSON error answers),
`sse` (the usage chunk of a stream), `waker` (wake/evict scheduling), `health` (probes,
restarts, following apply), `pool` (the instances' state and admission), `requestlog` (the
SQLite request log) and `metrics` (Prometheus). The choice of instance, of whom to wake and
of whom to evict is `planner.optimizer.tiering`'s, shared with the simulator.

The names below are imported on first use: reading the request log (`planner adjust`)
does not load aiohttp.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Gateway": "server",
    "GatewayConfig": "server",
    "GatewayThread": "server",
    "Auth": "auth",
    "run_forever": "server",
    "serve": "server",
    "SseUsage": "sse",
    "identity": "answers",
    "Unavailable": "waker",
    "overlaps": "pool",
    "LOG_COLUMNS": "requestlog",
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
