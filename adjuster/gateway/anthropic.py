"""Anthropic's Messages API through the gateway: its paths and its error shape.

Agents built on Anthropic's SDK (they read `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY`)
call `POST /v1/messages` (streamed or not) and `POST /v1/messages/count_tokens`, send their
key in `x-api-key`, and read errors as `{"type": "error", "error": {"type, "message"}}`.
The engines serve the routes themselves (vLLM 0.32: vllm/entrypoints/anthropic); the gateway
forwards them like the OpenAI ones (wake, stand-ins, queue limits, request log, metrics) and
gives its own errors on them (401, 404, 503, ...) in that shape. An engine's own errors there
are in that shape already and pass as they come.
"""

from __future__ import annotations

import json

from planner.adjuster.gateway.reply import Response

PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})

# HTTP status -> Anthropic's error type (docs.anthropic.com, "Errors")
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def as_anthropic_error(resp: Response) -> Response:
    """The gateway's OpenAI-style error answer in Anthropic's error shape (status and
    headers kept); any other answer as it is."""
    try:
        doc = json.loads(resp.body)
        err = doc["error"]
        message = err["message"]
    except (ValueError, LookupError, TypeError):
        return resp
    if doc.get("type") == "error":  # already in that shape (the engine's own)
        return resp
    kind = _TYPES.get(resp.status, "api_error")
    body = {"type": "error", "error": {"type": kind, "message": message}}
    resp.body = json.dumps(body).encode()
    return resp
