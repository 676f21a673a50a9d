"""Wake and evict scheduling: which sleeping instance wakes, whom it puts to sleep, and when.

The choices are `planner.optimizer.serving_rule`'s (the simulator's router calls the same
functions). The mechanics are the gateway's: a wake runs `InstanceControl.wake` in a thread
(the event loop keeps serving); first its displaced co-tenants are drained (no new requests;
in-flight ones finish: a busy instance is never put to sleep) and put to sleep. Before that,
the wake waits (`await_swap`, `planner.optimizer.swap`) while a displaced co-tenant is busy
or was woken less than `min_awake_s` ago, at most until the deadline of the request that
started it; requests for the waking model collate behind it meanwhile. One wake runs per model at
a time, under the locks of its GPUs (sorted: no deadlock between wakes); requests that
arrive meanwhile wait behind it, at most `queue_limit` of them per model, and the next one
gets 503 with Retry-After. A wake starts for a request, for a request a stand-in answered,
or ahead of requests at the start of an instance's awake hours (tiers.py). An instance whose
process died is started again through `InstanceControl.restart` (a counted restart), a
sleeping one through `wake` (the engine's wake steps: after a level-2 sleep the weights are
reloaded before it returns). Every wake and restart is checked before traffic goes to it:
the engine's one greedy check request (a one-token completion, or one embedding for an
embedding engine) whose answer must be the same one the instance's spec gave before (vLLM
has had level-2 wakes that answer garbage); a failed check restarts the instance once
(counted in /metrics), and a second failure fails the wake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math

import aiohttp

from planner.adjuster.backends.base import Handle
from planner.adjuster.gateway.answers import Unavailable
from planner.adjuster.gateway.clock import Clock
from planner.adjuster.gateway.config import GatewayConfig
from planner.adjuster.gateway.metrics import Metrics
from planner.adjuster.gateway.pool import Inst, Pool, failed, load
from planner.adjuster.gateway.upstream import Upstream
from planner.adjuster.reconcile import spec_sha
from planner.errors import ApplyError, DrainedError
from planner.optimizer import serving_rule, swap

log = logging.getLogger("planner.gateway")


def _woke_s(inst: Inst) -> float:
    return inst.woke_s


class Waker:
    """Wakes models on demand for the gateway."""

    def __init__(
        self, pool: Pool, up: Upstream, cfg: GatewayConfig, metrics: Metrics, clock: Clock
    ):
        self.pool = pool
        self.up = up
        self.cfg = cfg
        self.metrics = metrics
        self.clock = clock
        self.tasks: dict[str, asyncio.Task] = {}  # model -> its wake in progress
        self.wake_s: dict[str, float] = {}  # last measured wake time per model
        self.started_s: dict[str, float] = {}  # when the model's running wake started
        self._gpu_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self.check_answers: dict[str, str] = {}  # spec hash -> its wake check's answer

    def retry_after_s(self, model: str) -> float:
        """How long a refused client should wait: the model's last wake, else the default."""
        return self.wake_s.get(model, self.cfg.retry_after_s)

    def displaces(self, inst: Inst) -> list[Inst]:
        """The co-tenants a wake of `inst` puts to sleep now (`serving_rule.displaced`)."""
        pool = self.pool
        return serving_rule.displaced(
            inst, pool.near(inst), capacity_gib=pool.capacity, t_s=pool.clock()
        )

    def plan(self, model: str) -> tuple[Inst, list[Inst]]:
        """Which instance of `model` to wake and whom that puts to sleep (no side effect)."""
        target = serving_rule.choose_wake(self.pool.by_model[model], self.displaces, load, failed)
        return target, self.displaces(target)

    def expected_wait_s(self, model: str) -> float:
        """How long a request for `model` would wait for its wake: the last measured wake of
        the model less the time its running wake has taken; inf before any was measured."""
        took = self.wake_s.get(model, math.inf)
        started = self.started_s.get(model) if model in self.tasks else None
        if started is None:
            if not self.pool.by_model.get(model):
                return took
            victims = self.plan(model)[1]  # plus the wait for its swap (no drains)
            now = self.clock.mono_s()
            at = swap.swap_at_s(
                victims,
                now_s=now,
                deadline_s=self.swap_deadline_s(model, now),
                woke_s=_woke_s,
                min_awake_s=self.cfg.min_awake_s,
            )
            return took + (at - now)
        return max(took - (self.clock.mono_s() - started), 0.0)

    def swap_deadline_s(self, model: str, since_s: float) -> float:
        """The latest a swap for a request of `model` waiting since `since_s` may begin
        (`swap.swap_deadline_s`; its switch SLO: the substitute rule's `max_wait_s`)."""
        rule = self.pool.point.substitutes.get(model)
        slo_s = rule.max_wait_s if rule is not None else None
        return swap.swap_deadline_s(
            since_s, self.wake_s.get(model, 0.0), slo_s, self.cfg.swap_max_wait_s
        )

    def start_wake(self, model: str, target: Inst | None = None) -> asyncio.Task:
        """The model's wake in progress, started (of `target`, else of `plan`'s) if none runs."""
        task = self.tasks.get(model)
        if task is None:
            task = asyncio.create_task(self._wake_model(model, target))
            self.tasks[model] = task
            self.started_s[model] = self.clock.mono_s()

            def _done(t: asyncio.Task, model: str = model) -> None:
                if self.tasks.get(model) is t:
                    del self.tasks[model]
                if not t.cancelled():
                    t.exception()  # retrieved here; each waiter gets it through shield

            task.add_done_callback(_done)
        return task

    async def await_wake(self, model: str) -> None:
        """Join the model's wake (starting it if none runs); Unavailable if the queue is full."""
        pool, limit = self.pool, self.cfg.queue_limit
        if pool.waiting[model] >= limit:
            raise Unavailable(
                f"model {model!r} is waking and {pool.waiting[model]} requests already wait "
                f"(queue limit {limit})",
                self.retry_after_s(model),
            )
        task = self.start_wake(model)
        pool.waiting[model] += 1
        try:
            await asyncio.shield(task)
        finally:
            pool.waiting[model] -= 1

    @contextlib.asynccontextmanager
    async def gpus(self, inst: Inst):
        """Hold the locks of the instance's GPUs (sorted order: no deadlock between wakes)."""
        locks = [self._gpu_locks.setdefault(g, asyncio.Lock()) for g in sorted(inst.gpus)]
        async with contextlib.AsyncExitStack() as stack:
            for lk in locks:
                await stack.enter_async_context(lk)
            yield

    async def _wake_model(self, model: str, target: Inst | None = None) -> None:
        since_s = self.clock.mono_s()
        if target is None:
            target, _ = self.plan(model)
        async with self.gpus(target):
            if target.routable():
                return
            await self.await_swap(model, target, since_s)
            if target.routable():
                return
            try:
                await self.bring_up(target)
            except DrainedError as e:
                raise Unavailable(e.message, self.cfg.retry_after_s) from e
            except Exception as e:
                self.metrics.wake_failures[model] += 1
                target.status = "failed"
                target.want_awake = not target.lazy
                log.warning("wake of %s failed: %s", target.spec.id, e)
                raise Unavailable(
                    f"could not wake {target.spec.id}: {e}", self.retry_after_s(model)
                ) from e
        self.wake_s[model] = self.clock.mono_s() - since_s
        self.metrics.wakes[model] += 1
        self.pool.wake_waiters(model)

    async def await_swap(self, model: str, target: Inst, since_s: float) -> None:
        """Wait until the wake of `target` may put its co-tenants to sleep (`swap.swap_at_s`:
        none busy nor woken less than `min_awake_s` ago, at most until the deadline of the
        request that started the wake). Requests for `model` collate behind this wake."""
        pool, cfg = self.pool, self.cfg
        deadline = self.swap_deadline_s(model, since_s)

        def busy(v: Inst) -> bool:
            m = v.spec.model
            return v.outstanding > 0 or pool.waiting[m] > 0 or pool.queued_for_admission(m)

        while True:
            now = self.clock.mono_s()
            at = swap.swap_at_s(
                self.displaces(target),
                now_s=now,
                deadline_s=deadline,
                woke_s=_woke_s,
                busy=busy,
                min_awake_s=cfg.min_awake_s,
            )
            if at <= now:
                return
            await asyncio.sleep(min(at - now, 0.05))  # busy: look again soon

    async def bring_up(self, inst: Inst) -> None:
        """Evict its co-tenants, then wake it (restart it when its process died). The caller
        holds its GPU locks."""
        up, cfg = self.up, self.cfg
        if up.drained:
            raise DrainedError(up.drained)
        await self.evict(inst)
        try:
            if inst.status == "failed":
                handle = await up.call(up.control.restart, inst.spec.id, cfg.wake_timeout_s)
                self.metrics.restarts[inst.spec.id] += 1
            else:
                handle = await up.call(up.control.wake, inst.spec.id, cfg.wake_timeout_s)
            why = await self.check(inst, handle)
            if why:  # a wake that answers wrongly (vLLM has had such level-2 wakes): restart
                log.warning("wake check of %s failed (%s): restarting it", inst.spec.id, why)
                handle = await up.call(up.control.restart, inst.spec.id, cfg.wake_timeout_s)
                self.metrics.restarts[inst.spec.id] += 1
                why = await self.check(inst, handle)
                if why:
                    raise ApplyError(f"{inst.spec.id} answers wrongly after a restart: {why}")
        except DrainedError as e:  # `planner down` ran since the gateway last looked
            up.set_drained(e.message)
            raise
        inst.status = "awake"
        inst.handle = handle
        inst.want_awake = True
        inst.timeouts = 0
        inst.idle_since_s = self.pool.clock()
        inst.woke_s = self.clock.mono_s()

    async def check(self, inst: Inst, handle: Handle) -> str:
        """Send the woken instance its engine's one greedy check request (a one-token
        completion; one embedding for an embedding engine); "" when its answer is sound (and
        the same as this instance's spec gave before, if any), else why not. Counted in
        /metrics."""
        from planner.engines.base import get_engine

        session = self.up.session
        assert session is not None
        model = inst.spec.model
        self.metrics.wake_checks[model] += 1
        engine = get_engine(handle.engine)
        task = engine.task(inst.spec)
        route, body = engine.check_request(task, model)
        url = f"http://{handle.host}:{handle.port}{route}"
        try:
            async with session.post(
                url,
                json=body,
                headers=handle.auth_headers(),
                timeout=aiohttp.ClientTimeout(total=self.cfg.wake_check_timeout_s),
            ) as r:
                status, data = r.status, await r.read()
            text = engine.check_answer(task, data) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError) as e:
            text = None
            why = f"no answer ({type(e).__name__}: {e})"[:200]
        else:
            why = "" if text is not None else f"answered {status}: {data[:200]!r}"
        key = spec_sha(inst.spec)
        if not why:
            ref = self.check_answers.setdefault(key, text)  # type: ignore[arg-type]
            if text != ref:
                why = f"answered {text!r} where it answered {ref!r} before"
        if why:
            self.metrics.wake_check_failures[model] += 1
        return why

    async def evict(self, target: Inst) -> None:
        """Drain and sleep the co-tenants a wake of `target` displaces."""
        await self.put_to_sleep(self.displaces(target))

    async def put_to_sleep(self, victims: list[Inst]) -> None:
        """Drain `victims` (no new requests; in-flight ones finish, at most
        `drain_timeout_s`) and put them to sleep."""
        up, cfg = self.up, self.cfg
        if not victims:
            return
        for c in victims:
            c.draining = True
        try:
            waits = [asyncio.create_task(self.pool.until_idle(c)) for c in victims]
            # A busy instance is never put to sleep: its requests end by request_timeout_s.
            limit_s = max(cfg.drain_timeout_s, cfg.request_timeout_s)
            _, pending = await asyncio.wait(waits, timeout=limit_s)
            for t in pending:
                t.cancel()
            for c in victims:
                if c.outstanding:
                    log.warning("sleeping %s with %d requests in flight", c.spec.id, c.outstanding)
                await up.call(up.control.sleep, c.spec.id)
                c.status = "asleep"
                c.handle = None
                c.want_awake = False
                self.metrics.sleeps[c.spec.model] += 1
        finally:
            for c in victims:
                c.draining = False
