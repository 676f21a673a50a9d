"""Waits for the unit tests, with budgets taken from the machine's load.

A budget is what the wait needs on an idle machine times the load per core over the last
minute (at least 1): a 2-core machine that also runs other jobs starts threads, processes
and event loops several times slower, and a fixed deadline sized on an idle one is missed
there. A wait that is met returns at once, so a large budget costs nothing when all is well."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def load_factor() -> float:
    """Runnable processes per core over the last minute, at least 1."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def budget_s(idle_s: float) -> float:
    """A deadline, in s, for something that takes up to `idle_s` on an idle machine."""
    return idle_s * load_factor()


def wait_until(cond: Callable[[], object], what: str, idle_s: float = 20.0) -> None:
    """Poll `cond` until it is true; fail naming `what` when the load's budget runs out."""
    deadline = time.monotonic() + budget_s(idle_s)
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.02)


async def until_async(cond: Callable[[], object], what: str, idle_s: float = 10.0) -> None:
    """As wait_until, inside an event loop: the loop runs its other tasks while this polls."""
    import asyncio

    deadline = time.monotonic() + budget_s(idle_s)
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        await asyncio.sleep(0.01)
