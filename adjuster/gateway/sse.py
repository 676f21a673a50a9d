"""Server-sent events passed through while reading the usage chunk vLLM sends at the end.

To log token counts of a streamed request, the gateway asks the engine for
`stream_options.include_usage` when the client did not, and drops that extra usage-only
chunk (`"choices": []`) before it reaches the client. Only SSE events that contain a usage
object are parsed; all others pass as they come, except that an answer from a stand-in
names the model the client asked for (`rename_model`).

The Responses API (`/v1/responses`) names its events (`event: response.completed` before the
`data:` line) and puts usage inside the response (`response.usage`, `input_tokens` and
`output_tokens`); `tokens` reads either naming. Anthropic's Messages stream gives the input
tokens in `message_start` (`message.usage`) and the output tokens in `message_delta`: the
usages of a stream are merged, later values winning.
"""

from __future__ import annotations

import json
import re
from typing import Any


def rename_model(data: bytes, old: str, new: str) -> bytes:
    """JSON text (one answer, or SSE events) with its `"model": "old"` fields naming `new`
    (a quoted name inside a string value is escaped, so it does not match)."""
    pat = rb'("model"\s*:\s*)"' + re.escape(old.encode()) + rb'"'
    return re.sub(pat, lambda m: m.group(1) + json.dumps(new).encode(), data)


def usage_of(obj: Any) -> dict | None:
    """The usage object of an answer or event: top-level, or a Responses event's response's."""
    if not isinstance(obj, dict):
        return None
    u = obj.get("usage")
    for outer in ("response", "message"):  # Responses events; Anthropic's message_start
        if u is None and isinstance(obj.get(outer), dict):
            u = obj[outer].get("usage")
    return u if isinstance(u, dict) else None


def tokens(usage: dict | None) -> tuple[int, int, int]:
    """(input, output, cached) tokens of a usage object, in the Completions naming
    (`prompt_tokens`, ...) or the Responses one (`input_tokens`, ...); an embedding has no
    output, logged as 1 like any answer without usage (the trace counts at least one)."""
    u = usage or {}
    n_in = u.get("prompt_tokens", u.get("input_tokens"))
    n_out = u.get("completion_tokens", u.get("output_tokens"))
    details = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
    n_in = max(1, int(n_in or 0))
    return n_in, max(1, int(n_out or 0)), min(n_in, int(details.get("cached_tokens") or 0))


def _data(event: bytes) -> bytes | None:
    """The JSON object of an SSE event's `data:` line (after any `event:` line), if any."""
    for line in event.split(b"\n"):
        if line.startswith(b"data: {"):
            return line[6:]
    return None


_DECODER = json.JSONDecoder()
_USAGE_KEY = re.compile(rb'"usage"\s*:\s*')


def usage_in(data: bytes) -> dict | None:
    """The usage object of a whole (non-streamed) answer. When the text `"usage"` occurs
    once, as a key, only its object is parsed (a quote inside a JSON string is escaped, so
    the text cannot come from a prompt or an answer): not the whole answer. A usage object
    is a few numbers: one longer than 1 KiB falls back to the whole parse."""
    at = data.rfind(b'"usage"')  # vLLM puts usage near the end
    if at >= 0 and data.find(b'"usage"', 0, at) < 0:
        m = _USAGE_KEY.match(data, at)
        if m is not None:
            try:
                u = _DECODER.raw_decode(data[m.end() : m.end() + 1024].decode())[0]
            except (ValueError, UnicodeDecodeError):
                u = None
            if isinstance(u, dict):
                return u
    try:
        return usage_of(json.loads(data))
    except ValueError:
        return None


class SseUsage:
    """Passes an SSE byte stream through, reading (and optionally dropping) usage chunks.

    Bytes are held only up to the last complete event (blank line); blocks without the
    text `"usage"` pass without parsing.
    """

    def __init__(self, strip: bool, rename: tuple[str, str] | None = None):
        self.strip = strip
        self.rename = rename  # (stand-in, asked-for): the model name the client sees
        self.usage: dict | None = None
        self._buf = b""

    def feed(self, chunk: bytes) -> bytes:
        """Bytes to send on, for `chunk` just received."""
        if not self._buf and chunk.endswith(b"\n\n"):  # whole events (vLLM's usual chunk)
            return self._pass(chunk)
        buf = self._buf + chunk
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._buf = buf
            return b""
        out, self._buf = buf[: end + 2], buf[end + 2 :]
        return self._pass(out)

    def close(self) -> bytes:
        """What is left at the end of the stream."""
        out, self._buf = self._buf, b""
        return self._pass(out)

    def _pass(self, out: bytes) -> bytes:
        out = self._scan(out) if b'"usage"' in out else out
        return rename_model(out, *self.rename) if self.rename else out

    def _scan(self, block: bytes) -> bytes:
        kept = []
        for ev in block.split(b"\n\n"):
            data = _data(ev) if b'"usage"' in ev else None
            if data is not None:
                try:
                    obj = json.loads(data)
                except ValueError:
                    obj = None
                u = usage_of(obj)
                if u is not None:  # Anthropic's stream splits it: input first, output last
                    self.usage = {**self.usage, **u} if self.usage else u
                    if self.strip and not obj.get("choices"):
                        continue
            kept.append(ev)
        return b"\n\n".join(kept)
