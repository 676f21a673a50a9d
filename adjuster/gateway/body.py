"""A request body, read within bounds and checked before routing.

The body is read at most `READ_CHUNK` bytes at a time, never beyond the cap (413, before a
byte more is read when Content-Length says so); a pause longer than the body timeout ends it
(408, nginx's client_body_timeout), and so does a trickle (the whole body gets the timeout
plus the timeout per MiB). A body that is not a JSON object, nests deeper than the parser allows, names no
model, or gives `stream`/`stream_options` the wrong type is a 400 with a JSON error body as
vLLM answers it (`type` BadRequestError, `param` the field). Names a client sends (model,
user, session) are cut to `MAX_NAME` characters wherever they are echoed or stored.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planner.adjuster.gateway.h1body import BadRequest, OverBudget
from planner.adjuster.gateway.h1server import Request
from planner.adjuster.gateway.reply import Response, error

READ_CHUNK = 64 * 1024  # body bytes read at once
MAX_NAME = 200  # characters of a client-sent name kept
_DECODER = json.JSONDecoder()


def cut(name: str) -> str:
    """A client-sent name as echoed or stored: at most MAX_NAME characters."""
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 1] + "…"


@dataclass
class BadBody(Exception):
    """A body refused before routing: HTTP status, a reason label (metrics), the message."""

    status: int
    reason: str
    message: str
    param: str | None = None


async def read_body(
    request: Request, cap_bytes: int, timeout_s: float, clock: Callable[[], float]
) -> bytes:
    """The whole body, read in chunks; BadBody when too large, too slow or malformed
    (chunks) (`clock`: monotonic seconds)."""
    length = request.body.length
    if length is not None and length > cap_bytes:
        raise BadBody(413, "too_large", _too_large(cap_bytes))
    body = request.body
    whole = body.ready()
    if whole is not None:  # the common case: it came with the headers
        return whole
    buf = bytearray()
    t0 = clock()
    while True:
        # a pause of timeout_s ends it, and so does a trickle: the whole body may take
        # timeout_s plus timeout_s per MiB received (a byte a second never finishes)
        left_s = t0 + timeout_s * (1 + len(buf) / (1 << 20)) - clock()
        try:
            async with asyncio.timeout(min(timeout_s, max(left_s, 0.0))):
                chunk = await body.read(READ_CHUNK)
        except TimeoutError:
            raise BadBody(
                408,
                "body_timeout",
                f"the body paused for more than {timeout_s:g} s or arrived slower than "
                f"1 MiB per {timeout_s:g} s",
            ) from None
        except BadRequest as e:
            raise BadBody(e.status, "bad_chunks", str(e)) from None
        except OverBudget as e:
            raise BadBody(503, "over_budget", f"{e}; retry shortly") from None
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > cap_bytes:
            raise BadBody(413, "too_large", _too_large(cap_bytes))


def too_large(cap_bytes: int) -> Response:
    """The 413 of a body over the cap."""
    return error(413, _too_large(cap_bytes), "RequestEntityTooLargeError")


def _too_large(cap_bytes: int) -> str:
    return f"the body exceeds {cap_bytes // (1024 * 1024)} MiB"


def parse(body: bytes) -> dict[str, Any]:
    """The request as a dict; BadBody (400) for anything a model server would refuse."""
    try:
        payload = _loads(body)
    except ValueError:
        raise BadBody(400, "not_json", "the body is not valid JSON") from None
    except RecursionError:  # the C parser's own bound on nesting, as deep as Python's stack
        raise BadBody(400, "too_deep", "the JSON body nests too deeply") from None
    if not isinstance(payload, dict):
        raise BadBody(400, "not_object", "the body must be a JSON object")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise BadBody(400, "no_model", "the body names no `model` (a string)", "model")
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadBody(
            400, "bad_stream", f"`stream` must be true or false, not {_kind(stream)}", "stream"
        )
    opts = payload.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise BadBody(
                400,
                "bad_stream_options",
                f"`stream_options` must be an object, not {_kind(opts)}",
                "stream_options",
            )
        usage = opts.get("include_usage")
        if usage is not None and not isinstance(usage, bool):
            raise BadBody(
                400,
                "bad_stream_options",
                f"`stream_options.include_usage` must be true or false, not {_kind(usage)}",
                "stream_options",
            )
    return payload


def _loads(body: bytes) -> Any:
    """`json.loads(body)`. A body that starts with `{` and a byte that is not NUL is UTF-8
    by json.loads' own detection: it is decoded as json.loads would, without the detection
    and its calls (the gateway's CPU per request is throughput lost)."""
    if body[:1] == b"{" and body[1:2] != b"\x00":
        return _DECODER.decode(body.decode("utf-8", "surrogatepass"))
    return json.loads(body)


def _kind(v: Any) -> str:
    return {
        str: "a string",
        int: "a number",
        float: "a number",
        list: "a list",
        dict: "an object",
    }.get(type(v), type(v).__name__)
