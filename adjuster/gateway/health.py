"""The health loop: probe the instances that should be awake, restart dead ones, follow apply.

Every `health_interval_s` the gateway probes `/health` of each instance that should be awake
(tier gpu, or woken by the gateway); a dead one (refused, or three timeouts in a row) is
started again through `InstanceControl.restart` (a counted, journaled restart) after a
capped exponential backoff (`backoff_base_s` * 2^(failures-1), at most `backoff_cap_s`;
`failures` resets only when a probe finds it healthy again). Every `adopt_every` rounds, and
whenever a request finds an instance dead, the gateway asks the controller for the point in
force (`follow`: after `planner apply` of another plan or point, or a hop of `planner adjust`,
it routes by the new point's instances and tiers; requests in flight finish where they are)
and for the instances' status (instances started elsewhere, e.g. by `planner apply`, are
routed to). Before it restarts a dead instance it follows the point in force again: an
instance that an apply stopped because its point no longer has it is never started again.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from planner.adjuster.gateway.clock import Clock
from planner.adjuster.gateway.config import GatewayConfig
from planner.adjuster.gateway.pool import Inst, Pool
from planner.adjuster.gateway.upstream import Upstream
from planner.adjuster.gateway.waker import Waker
from planner.optimizer import serving_rule

log = logging.getLogger("planner.gateway")


class Health:
    """Probes, restarts and adoption for the gateway."""

    def __init__(self, pool: Pool, up: Upstream, waker: Waker, cfg: GatewayConfig, clock: Clock):
        self.pool = pool
        self.up = up
        self.waker = waker
        self.cfg = cfg
        self.clock = clock
        self._adopting: asyncio.Lock | None = None

    async def loop(self) -> None:
        n = 0
        while True:
            await asyncio.sleep(self.cfg.health_interval_s)
            n += 1
            if n % self.cfg.adopt_every == 0:
                try:
                    await self.adopt()
                except Exception as e:
                    log.warning("reading the controller's status: %s", e)
            for inst in list(self.pool.instances.values()):
                try:
                    await self.check(inst)
                except Exception as e:  # one instance's trouble must not stop the loop
                    log.warning("health check of %s: %s", inst.spec.id, e)

    async def adopt(self) -> None:
        """Follow the point in force; take over instances that became awake outside the
        gateway (e.g. `planner apply`). Concurrent calls share one read."""
        if self._adopting is None:
            self._adopting = asyncio.Lock()
        if self._adopting.locked():
            async with self._adopting:  # someone else is reading: wait for their answer
                return
        async with self._adopting:
            await self._adopt()

    async def _adopt(self) -> None:
        up, pool = self.up, self.pool
        up.set_drained(await up.call(up.control.drained))
        if up.drained:
            return
        point = await up.call(up.control.follow)
        if point != pool.point:  # another point, of this plan or of another one
            log.info("following point %s (was %s)", point.name, pool.point.name)
            pool.set_point(point)
        insts = pool.instances
        epochs = {iid: i.epoch for iid, i in insts.items()}
        st = await up.call(up.control.status)
        for iid, inst in list(insts.items()):
            status, handle = st.get(iid, ("stopped", None))
            busy = (
                inst.spec.model in self.waker.tasks
                or inst.draining
                or inst.epoch != epochs.get(iid, inst.epoch)
            )
            if status == "awake" and handle is not None and not inst.routable() and not busy:
                inst.status = "awake"
                inst.handle = handle
                inst.want_awake = True
                pool.wake_waiters(inst.spec.model)

    async def probe(self, inst: Inst) -> bool | None:
        """True: healthy; False: dead; None: no answer in time (busy or hung)."""
        session = self.up.session
        assert session is not None
        try:
            async with session.get(
                inst.url + "/health",
                headers=inst.auth_headers,
                timeout=aiohttp.ClientTimeout(total=self.cfg.health_timeout_s),
            ) as r:
                return r.status == 200
        except TimeoutError:
            return None
        except aiohttp.ClientError:
            return False

    def backoff_s(self, inst: Inst) -> float:
        cfg = self.cfg
        return min(cfg.backoff_cap_s, cfg.backoff_base_s * 2 ** max(0, inst.failures - 1))

    def mark_dead(self, inst: Inst) -> None:
        """The instance's process is gone: route around it, restart after the backoff."""
        if inst.status != "failed":
            log.warning("instance %s is dead", inst.spec.id)
            inst.status, inst.timeouts = "failed", 0
            inst.failures += 1
            inst.next_restart_at = self.clock.mono_s() + self.backoff_s(inst)

    async def check(self, inst: Inst) -> None:
        """Probe one instance that should be awake; restart it after its backoff if dead."""
        if (
            self.up.drained
            or not inst.want_awake
            or inst.draining
            or inst.spec.model in self.waker.tasks
        ):
            return
        if inst.status == "awake" and inst.handle is not None:
            if not await self._dead(inst):
                return
            self.mark_dead(inst)
        if inst.lazy and serving_rule.hour_of_day(self.pool.clock()) not in inst.awake_hours:
            # a host/disk instance starts for a request or its awake hours, not on its own:
            # its next request restarts it
            inst.want_awake = False
            return
        if self.clock.mono_s() < inst.next_restart_at:
            return
        await self._restart(inst)

    async def _dead(self, inst: Inst) -> bool:
        """Whether a probe finds the awake instance dead: it fails, or times out a third
        time in a row (an answer about an instance put to sleep or restarted meanwhile
        counts for nothing)."""
        epoch = inst.epoch
        ok = await self.probe(inst)
        if inst.epoch != epoch or inst.draining or not inst.want_awake:
            return False  # the answer is about the old one
        if ok is None:
            inst.timeouts += 1
            return inst.timeouts >= 3
        if ok:
            inst.timeouts = inst.failures = 0
            return False
        return True

    async def _restart(self, inst: Inst) -> None:
        """Start a dead instance again once its backoff is over, unless an apply, a wake or a
        sleep has taken it on meanwhile."""
        pool = self.pool
        await self.adopt()  # an apply may have stopped it on purpose: follow it first
        if pool.instances.get(inst.spec.id) is not inst or self.up.drained:
            return  # the point in force no longer has it (or `planner down` ran)
        async with self.waker.gpus(inst):
            if inst.routable() or not inst.want_awake:  # a wake or a sleep came first
                return
            try:
                await self.waker.bring_up(inst)
            except Exception as e:
                inst.failures += 1
                inst.status = "failed"
                inst.next_restart_at = self.clock.mono_s() + self.backoff_s(inst)
                log.warning(
                    "restart of %s failed (%d in a row): %s", inst.spec.id, inst.failures, e
                )
                return
            # `failures` stays until a probe finds it healthy: a crash loop keeps backing off.
        pool.wake_waiters(inst.spec.model)
