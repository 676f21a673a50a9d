"""Who is asking (user, session) and the OpenAI-style error answers every path gives."""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from planner.keys import key_id


class Unavailable(Exception):
    """No instance can take the request now; becomes a 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


def identity(headers: Any, secret: bytes) -> tuple[str, str]:
    """(user, session) without a keys file: X-User / X-Session, or the bearer key's id (an
    HMAC with the install's `secret`, planner.keys.key_id) as the user."""
    user = headers.get("X-User", "")
    if not user:
        auth = headers.get("Authorization", "")
        if auth[:7].lower() == "bearer " and auth[7:].strip():
            user = key_id(secret, auth[7:].strip())
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


async def expect_continue(request: web.BaseRequest) -> web.Response | None:
    """Answer a request's `Expect` header before its body is read: `100 Continue` (None:
    go on), or 417 for any other expectation (as aiohttp's router does)."""
    expect = request.headers.get("Expect", "")
    if request.version != (1, 1):
        return None
    if expect.lower() != "100-continue":
        return error(417, f"unknown Expect: {expect}", "ExpectationFailedError")
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the answer's own size starts after this line
    await request.writer.drain()
    return None
