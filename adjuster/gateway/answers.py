"""Who is asking (user, session) and the OpenAI-style error answers every path gives."""

from __future__ import annotations

import math
from collections.abc import Mapping

from planner.adjuster.gateway.reply import Response, error
from planner.keys import key_id

__all__ = ["Unavailable", "error", "identity", "presented_key", "unavailable"]


class Unavailable(Exception):
    """No instance can take the request now; becomes a 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


def identity(headers: Mapping[str, str], secret: bytes) -> tuple[str, str]:
    """(user, session) without a keys file: X-User / X-Session, or the bearer key's id (an
    HMAC with the install's `secret`, planner.keys.key_id) as the user (`headers`: by
    lower-case name, as h1server.Headers)."""
    user = headers.get("x-user", "")
    if not user:
        key = presented_key(headers)
        if key:
            user = key_id(secret, key)
    return user, headers.get("x-session", "")


def presented_key(headers: Mapping[str, str]) -> str:
    """The key a request presents: `Authorization: Bearer KEY` (OpenAI's clients) or
    `x-api-key: KEY` (Anthropic's); "" when none (`headers`: by lower-case name)."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    return headers.get("x-api-key", "").strip()


def unavailable(e: Unavailable) -> Response:
    return error(
        503,
        str(e),
        "ServiceUnavailableError",
        headers={"Retry-After": str(max(1, math.ceil(e.retry_after_s)))},
    )
