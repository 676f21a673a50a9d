"""The gateway's side towards its engines: the HTTP session, the controller's calls (in
threads: the event loop keeps serving) and `planner down`'s drain, as one collaborator of
the parts that wake, probe and proxy."""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp

from planner.adjuster.backends.base import InstanceControl
from planner.adjuster.gateway.http1 import Http1
from planner.adjuster.gateway.pool import Pool


class Upstream:
    """The engines as the gateway reaches them: `session` (opened by `open`), `call` (a
    blocking InstanceControl method in the gateway's threads), `drained`."""

    def __init__(self, control: InstanceControl, pool: Pool, control_threads: int):
        self.control = control
        self.pool = pool
        self.session: aiohttp.ClientSession | None = None  # streams, probes, wake checks
        self.http = Http1()  # non-streamed proxied requests (the hot path)
        self.request_timeout_s = 0.0
        self.threads = ThreadPoolExecutor(control_threads, thread_name_prefix="control")
        self.drained = ""  # why nothing may start or wake (`planner down`), or ""

    def open(self, request_timeout_s: float) -> None:
        """Open the engines' HTTP session (on the running loop)."""
        self.request_timeout_s = request_timeout_s
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=request_timeout_s),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # one user's cookies must never reach another's
        )

    async def close_session(self) -> None:
        if self.session is not None:
            await self.session.close()
        self.http.close()

    async def call(self, fn: Any, *args: Any) -> Any:
        """Run a blocking InstanceControl call in the gateway's threads."""
        return await asyncio.get_running_loop().run_in_executor(self.threads, fn, *args)

    async def refresh(self) -> None:
        """Take status and handles from the controller (at start; after external changes)."""
        self.set_drained(await self.call(self.control.drained))
        st = await self.call(self.control.status)
        for iid, inst in self.pool.instances.items():
            status, handle = st.get(iid, ("stopped", None))
            inst.status, inst.handle = status, handle
            inst.want_awake = inst.spec.tier == "gpu" or status == "awake"
            if status == "awake" and inst.idle_since_s == -math.inf:
                inst.idle_since_s = self.pool.clock()  # idle, as far as the gateway knows

    def set_drained(self, why: str) -> None:
        """Follow `planner down` (why != "") and the next apply (""): while drained, every
        request gets 503 and no instance is started, woken or restarted."""
        if why and not self.drained:
            for inst in self.pool.instances.values():
                inst.want_awake = False
                if inst.status != "stopped":
                    inst.status, inst.handle = "stopped", None
            self.pool.wake_all_waiters()
        self.drained = why
