"""Who is asking (user, session) and the OpenAI-style error answers every path gives."""

from __future__ import annotations

import hashlib
import math
from typing import Any

from aiohttp import web

from planner.adjuster.gateway.waker import Unavailable


def identity(headers: Any) -> tuple[str, str]:
    """(user, session) from X-User / X-Session, or a hash of the bearer key as the user."""
    user = headers.get("X-User", "")
    if not user:
        auth = headers.get("Authorization", "")
        if auth[:7].lower() == "bearer " and auth[7:].strip():
            user = "key-" + hashlib.sha256(auth[7:].strip().encode()).hexdigest()[:12]
    return user, headers.get("X-Session", "")


def error(
    status: int, message: str, kind: str, *, headers: dict | None = None, **extra: Any
) -> web.Response:
    """An OpenAI-style JSON error body."""
    body = {"error": {"message": message, "type": kind, "code": status, **extra}}
    return web.json_response(body, status=status, headers=headers)


def unavailable(e: Unavailable) -> web.Response:
    return error(
        503, str(e), "ServiceUnavailableError",
        headers={"Retry-After": str(max(1, math.ceil(e.retry_after_s)))},
    )  # fmt: skip
