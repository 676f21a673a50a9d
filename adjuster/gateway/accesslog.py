"""The access log (`planner gateway --access-log PATH`): one line per request, for people.

A line (logfmt, UTC):
`2026-01-05T09:30:12.345Z user=alice model=coder route=/v1/chat/completions status=200
wake_wait_s=0.000 latency_s=0.412 input_tokens=812 output_tokens=97` (one line), then
`served_by=M` when a stand-in answered and `error="..."` for a request no engine answered.
Values with spaces, quotes or control characters are JSON-quoted: a line is always one line.
Never written: bearer keys (the user is the key's name or an HMAC id), prompts or answers.

The event loop only queues an entry; the gateway's flush loop formats and appends the lines
in a thread (the loop never waits on the disk). The file is created 0600 whatever the umask
(a path that cannot be opened stops the start: exit 2);
a file moved away (log rotation) is noticed at the next flush and PATH is created again. A
failed write keeps the lines (at most `max_pending`, the oldest dropped and counted) and is
logged once per `warn_every_s`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from planner.adjuster.gateway.clock import SYSTEM
from planner.errors import InputError

log = logging.getLogger("planner.gateway")


class AccessEntry(NamedTuple):
    """What one line says (made on the loop; formatted in the flush thread)."""

    timestamp: float  # arrival, epoch seconds
    user: str
    model: str
    route: str
    status: int
    wake_wait_s: float
    latency_s: float
    input_tokens: int
    output_tokens: int
    served_by: str  # "" when the model itself answered
    error: str  # "" when an engine answered


def _value(v: str) -> str:
    """A logfmt value: bare when plain, else JSON-quoted (one line, no ambiguity)."""
    if v and v.isprintable() and not any(c in v for c in ' "=\\'):
        return v
    return json.dumps(v)


def format_line(e: AccessEntry) -> str:
    """The line of one entry (without its newline)."""
    when = datetime.fromtimestamp(e.timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    line = (
        f"{when}Z user={_value(e.user)} model={_value(e.model)} route={_value(e.route)} "
        f"status={e.status} wake_wait_s={e.wake_wait_s:.3f} latency_s={e.latency_s:.3f} "
        f"input_tokens={e.input_tokens} output_tokens={e.output_tokens}"
    )
    if e.served_by:
        line += f" served_by={_value(e.served_by)}"
    if e.error:
        line += f" error={_value(e.error)}"
    return line


class AccessLog:
    """Queued, thread-flushed writer of the access log (see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_pending: int = 100_000,
        warn_every_s: float = 60.0,
        clock: Callable[[], float] = SYSTEM.mono_s,
    ):
        self.path = Path(path)
        self.clock = clock
        self.max_pending = max_pending
        self.warn_every_s = warn_every_s
        self.dropped = 0  # entries lost to a full buffer
        self._entries: deque[AccessEntry] = deque()
        self._lock = threading.Lock()
        self._fd = -1
        self._inode = -1
        self._warned_s: float | None = None  # when a failed write was last logged
        try:
            self._open()
        except OSError as e:  # before anything starts: exit 2 naming the file
            raise InputError(
                f"cannot open the access log: {e.strerror}",
                file=str(self.path),
                path="--access-log",
                fix="pass a file in a writable directory",
            ) from None

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)  # also an existing file: who asked for what is private
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._inode = fd, os.fstat(fd).st_ino

    def add(self, entry: AccessEntry) -> None:
        """Queue one entry (the event loop: no I/O)."""
        self._entries.append(entry)
        if len(self._entries) > self.max_pending:
            self._entries.popleft()
            self.dropped += 1

    def pending(self) -> int:
        return len(self._entries)

    def flush(self) -> bool:
        """Append the queued lines (a thread); False when the write failed (they stay)."""
        with self._lock:
            entries = list(self._entries)
            if not entries or self._fd < 0:
                return True
            try:
                if _inode(self.path) != self._inode:  # rotated (moved or deleted): reopen
                    self._open()
                data = "".join(format_line(e) + "\n" for e in entries).encode()
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError as e:
                now_s = self.clock()
                if self._warned_s is None or now_s - self._warned_s >= self.warn_every_s:
                    self._warned_s = now_s
                    log.warning("access log %s: cannot write (%s); lines wait", self.path, e)
                return False
            for _ in entries:
                self._entries.popleft()
            self._warned_s = None
            return True

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _inode(path: Path) -> int:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return -1
