"""Talking to one engine server for `planner profile engine`: token-id prompts, streamed
completions time-stamped chunk by chunk, and the KV capacity the engine reports.

The completions (timed, streamed or not) are measurement traffic and keep their own clients;
the control calls (sleep, wake, metrics) go through planner/control_http.py like every other."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner import control_http
from planner.control_http import Purpose

if TYPE_CHECKING:
    from planner.engines.base import Engine


def vocab_size_of(path: str, fallback: int) -> int:
    """Vocabulary size from a local checkpoint's config.json, else `fallback`."""
    try:
        cfg = json.loads((Path(path).expanduser() / "config.json").read_text())
        return int(cfg.get("vocab_size") or fallback)
    except (OSError, ValueError, TypeError):
        return fallback


def prompt_ids(n_tokens: int, vocab: int, rng: Any) -> list[int]:
    """`n_tokens` random token ids, clear of the low ids that tokenizers reserve for specials."""
    lo = min(16, max(1, vocab // 4))
    hi = max(lo + 1, min(vocab, 30000))
    return [int(x) for x in rng.integers(lo, hi, size=n_tokens)]


Chunk = tuple[float, int]  # (arrival time s, completion tokens so far; -1: not reported)


def chunk_tokens(line: str) -> int | None:
    """Completion tokens so far from one SSE line; None for lines that carry no token.

    The final usage-only chunk (no choices) and `[DONE]` are not tokens; -1 when a token
    chunk has no usage (a server without continuous usage stats).
    """
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return None
    try:
        d = json.loads(payload)
    except ValueError:
        return None
    if not d.get("choices"):
        return None
    n = (d.get("usage") or {}).get("completion_tokens")
    return int(n) if n is not None else -1


def tpot_of(chunks: list[Chunk]) -> float | None:
    """Time per output token of one stream: (last - first chunk) / tokens between them.

    Without token counts each chunk counts as one token.
    """
    if len(chunks) < 2:
        return None
    (t0, n0), (t1, n1) = chunks[0], chunks[-1]
    tokens = n1 - n0 if n0 >= 0 and n1 >= 0 else len(chunks) - 1
    return (t1 - t0) / tokens if tokens > 0 else None


async def stream_completion(
    host: str, port: int, route: str, body: dict, timeout_s: float = 600.0, secret: str = ""
) -> tuple[float, list[Chunk]]:
    """POST a streamed completion (the engine's `completion_body`) to `route` (its
    `completion_route`) over a bare asyncio connection; (send time, token chunks).

    A full HTTP client costs enough CPU per chunk that, with many concurrent streams on a
    small host, chunks wait in the socket and are time-stamped late and in bursts. This
    reader does only what the measurement needs: one HTTP/1.1 request, then chunked
    transfer decoding and SSE `data:` lines, each time-stamped as it is decoded.
    """
    payload = json.dumps(body).encode()
    auth = f"Authorization: Bearer {secret}\r\n" if secret else ""
    head = (
        f"POST {route} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n{auth}"
        f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode()

    async def run() -> tuple[float, list[Chunk]]:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            t0 = time.perf_counter()
            writer.write(head + payload)
            await writer.drain()
            status = (await reader.readline()).decode(errors="replace")
            if " 200 " not in status:
                raise RuntimeError(f"completion request failed: {status.strip()}")
            chunked = False
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                    chunked = True
            chunks: list[Chunk] = []
            buf = b""
            while True:
                if chunked:
                    size_line = await reader.readline()
                    if not size_line:
                        break
                    size = int(size_line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        break
                    data = (await reader.readexactly(size + 2))[:-2]  # chunk + CRLF
                else:
                    data = await reader.read(65536)
                    if not data:
                        break
                buf += data
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    n = chunk_tokens(raw.decode(errors="replace").strip())
                    if n is not None:
                        chunks.append((time.perf_counter(), n))
            return t0, chunks
        finally:
            writer.close()

    return await asyncio.wait_for(run(), timeout_s)


class Client:
    """Timed requests to one server of `engine` (httpx imported here: the CLI stays light)."""

    def __init__(
        self,
        port: int,
        served: str,
        timeout_s: float,
        host: str = "127.0.0.1",
        secret: str = "",
        *,
        engine: Engine,
    ):
        import httpx

        from planner.control_http import auth_headers

        self.base = f"http://{host}:{port}"
        self.host, self.port = host, port
        self.engine = engine
        self.served = served
        self.timeout_s = timeout_s
        self.secret = secret
        self.http = httpx.Client(
            base_url=self.base, timeout=timeout_s, headers=auth_headers(secret)
        )

    def close(self) -> None:
        self.http.close()

    def complete_s(self, ids: list[int], max_tokens: int = 1) -> float:
        """Wall time of one non-streamed completion, s."""
        body = self.engine.completion_body(self.served, ids, max_tokens, stream=False)
        t0 = time.perf_counter()
        r = self.http.post(self.engine.completion_route, json=body)
        dt = time.perf_counter() - t0
        r.raise_for_status()
        return dt

    def post_s(
        self, path: str, body: dict | None = None, *, purpose: Purpose = "wake"
    ) -> tuple[float, int]:
        """(seconds, status) of a control POST (sleep, wake, reload): a control call, with
        that call's timeout (planner/control_http.py)."""
        t0 = time.perf_counter()
        reply = control_http.post(
            self.host, self.port, path, purpose=purpose, secret=self.secret, body=body
        )
        return time.perf_counter() - t0, reply.status

    def metrics(self) -> str:
        """The server's metrics text ("" when it answers other than 200)."""
        reply = control_http.get(
            self.host, self.port, "/metrics", purpose="metrics", secret=self.secret
        )
        return reply.text if reply.ok else ""

    def streams(self, prompts: list[list[int]], out_tokens: int) -> list[tuple[float, list[Chunk]]]:
        """Start every prompt at once as a stream; per request (start, token chunks)."""

        async def go() -> list[tuple[float, list[Chunk]]]:
            return list(
                await asyncio.gather(
                    *(
                        stream_completion(
                            self.host,
                            self.port,
                            self.engine.completion_route,
                            self.engine.completion_body(self.served, p, out_tokens, stream=True),
                            self.timeout_s,
                            self.secret,
                        )
                        for p in prompts
                    )
                )
            )

        return asyncio.run(go())
