"""Writing to a client: an event stream's headers, chunks, and its end.

A streamed answer may begin before an engine answers (SSE comments while a model wakes,
proxy.py); an error that comes instead then ends it as a `data:` event with its JSON body,
as OpenAI streams report errors.
"""

from __future__ import annotations

from planner.adjuster.gateway.h1server import Request
from planner.adjuster.gateway.reply import Response, StreamResponse

SERVED_BY = "X-Planner-Served-By"  # answer header: the model that answered


class ClientGone(Exception):
    """Writing to the client failed: it left."""


def event_stream(served_by: str) -> StreamResponse:
    return StreamResponse(
        status=200,
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            SERVED_BY: served_by,
        },
    )


async def end_stream(
    early: StreamResponse, request: Request, out: Response | StreamResponse
) -> StreamResponse:
    """End a stream begun while waiting with the answer that came instead (an error: as an
    SSE `data:` event with its JSON body, as OpenAI streams report errors)."""
    body = out.body if isinstance(out, Response) and out.body else b"{}"
    try:
        await send(early, request, b"data: " + body + b"\n\n")
        await send(early, request, b"", eof=True)
    except ClientGone:
        pass
    return early


async def send(resp: StreamResponse, request: Request, data: bytes, eof=False) -> None:
    """Write to the client (headers first); a client that left raises ClientGone."""
    try:
        if not resp.prepared:
            await resp.prepare(request)
        if eof:
            await resp.write_eof()
        else:
            await resp.write(data)
    except ConnectionError as e:
        raise ClientGone(str(e)) from e
