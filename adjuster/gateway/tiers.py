"""The plan's tiers over the day: wakes ahead of requests and idle sleeps, as the simulator
models them (`planner.optimizer.serving_rule`: `wakes_ahead`, `sleep_due_s`).

Every `tier_interval_s` the gateway looks at the point's host/disk instances:
- at the start of an hour (the first look in a new hour of the day, UTC), a sleeping one
  whose awake hours hold that hour is woken, unless that would put to sleep a co-tenant
  within its own awake hours or one serving requests;
- an awake one that has served nothing for the point's `idle_sleep_s`, outside its awake
  hours, is put to sleep.
A request for a model also wakes the models the point's `handoff` lists after it, where
`serving_rule.wakes_on_handoff` allows (`hand_off`, called by the proxy on each request).
"""

from __future__ import annotations

import asyncio
import logging

from planner.adjuster.gateway.pool import Inst, Pool, load
from planner.adjuster.gateway.upstream import Upstream
from planner.adjuster.gateway.waker import Waker
from planner.optimizer import serving_rule

log = logging.getLogger("planner.gateway")


class Tiers:
    """Applies the point's awake hours and idle sleeps."""

    def __init__(self, pool: Pool, up: Upstream, waker: Waker, interval_s: float):
        self.pool = pool
        self.up = up
        self.waker = waker
        self.interval_s = interval_s
        self.hour: int | None = None  # hour of day of the last look

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.tick()
            except Exception as e:  # a failed sleep or wake must not end the loop
                log.warning("tier change failed: %s", e)

    async def tick(self) -> None:
        """One look (see the module docstring)."""
        if self.up.drained:
            return  # `planner down`: nothing wakes until the next apply
        now = self.pool.clock()
        for inst in self.due_sleeps(now):
            await self.sleep(inst)
        hour = serving_rule.hour_of_day(now)
        if hour == self.hour:
            return
        self.hour = hour
        for inst in self.due_wakes(now):
            self.waker.start_wake(inst.spec.model, inst)

    def due_wakes(self, now: float) -> list[Inst]:
        """Sleeping host/disk instances to wake ahead of their requests at an hour start."""
        waker = self.waker
        return [
            i
            for i in self.pool.instances.values()
            if i.status in ("asleep", "stopped")  # stopped: asleep without sleep mode
            and i.awake_hours
            and i.spec.model not in waker.tasks
            and serving_rule.wakes_ahead(i, waker.displaces(i), load, now)
        ]

    def hand_off(self, model: str) -> None:
        """Wake ahead a sleeping instance of each model the point's `handoff` lists after
        `model` that has none awake or waking (`serving_rule.wakes_on_handoff`)."""
        pool, waker = self.pool, self.waker
        if self.up.drained:
            return
        for m in self.pool.point.handoff.get(model, ()):
            insts = pool.by_model.get(m, ())
            if m in waker.tasks or any(i.awake for i in insts):
                continue
            target = next(
                (
                    i
                    for i in insts
                    if i.status in ("asleep", "stopped")
                    and serving_rule.wakes_on_handoff(i, pool.near(i), pool.capacity)
                ),
                None,
            )
            if target is not None:
                waker.start_wake(m, target)

    def due_sleeps(self, now: float) -> list[Inst]:
        """Awake host/disk instances with nothing to do past their idle sleep."""
        idle_s = self.pool.point.idle_sleep_s
        return [
            i
            for i in self.pool.instances.values()
            if i.lazy
            and i.routable()
            and i.outstanding == 0
            and serving_rule.sleep_due_s(i, i.idle_since_s, idle_s) <= now
        ]

    async def sleep(self, inst: Inst) -> None:
        """Put an idle instance to sleep, under its GPUs' locks (no wake runs meanwhile)."""
        waker = self.waker
        if inst.spec.model in waker.tasks:
            return
        async with waker.gpus(inst):
            if not inst.routable() or inst.outstanding:
                return  # taken meanwhile
            await waker.put_to_sleep([inst])
        log.info("%s slept after %.0f s idle", inst.spec.id, self.pool.point.idle_sleep_s)
