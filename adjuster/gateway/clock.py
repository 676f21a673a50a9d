"""The gateway's one source of time (its parts read no other: tests and replays inject theirs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    """`now_s()`: epoch seconds (log timestamps, the plan's hours of day); `mono_s()`:
    monotonic seconds (durations, deadlines, backoffs: never jumps with the wall clock)."""

    now_s: Callable[[], float] = time.time
    mono_s: Callable[[], float] = time.perf_counter


SYSTEM = Clock()
