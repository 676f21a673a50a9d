"""`simulate`: replay a trace against one plan point and measure what users would feel.

Two paths, the same engine:
- an instance that is the only one of its model and can never be displaced (gpu tier, or a
  host/disk instance with no host/disk co-tenant and no idle timeout) sees exactly its
  model's requests at their arrival times. Its requests are computed with numpy: all as
  lone requests, then only the busy periods (a request arriving before the previous one
  finished) are re-run through the batch engine (`alone`);
- every other request goes through the router one by one in arrival order (wakes,
  co-tenant drains, least-loaded routing), and its instance's engine either takes it as a
  lone request (closed form) or simulates the batch.

Prefix reuse: a request's `cached_tokens` skip prefill when the same session's previous
call went to the same instance and the instance has stayed awake since. After a sleep the
GPU copy is gone; an instance with `kv_cpu_offload_gib` still has prefixes up to that size
in host RAM and brings them back at the host-to-GPU rate of its wakes before the request
enters the engine. Prefix eviction under GPU memory pressure is not modelled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.optimizer import serving_rule
from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.sim import alone, lonememo
from planner.optimizer.sim.admit import Admission, never_sleeping_bound
from planner.optimizer.sim.event import Timeline
from planner.optimizer.sim.instance import Engine
from planner.optimizer.sim.lonememo import lone_pair, lone_times_of
from planner.optimizer.sim.metrics import SimResult, measure
from planner.optimizer.sim.request import Outcome, Requests, to_requests
from planner.optimizer.sim.router import Router, Slot
from planner.optimizer.sim.slots import handoffs, point_slots, substitutes
from planner.optimizer.sim.steptime import lone_times
from planner.schemas.plan import Point
from planner.schemas.slo import Slo


def simulate(
    point: Point,
    perfs: dict[str, InstancePerf],
    trace: Any,
    slo: Slo,
    *,
    sleep_after_idle_s: float | None = None,
    policy: str | serving_rule.EvictionPolicy = serving_rule.PLAN,
    gpu_memory_gib: dict[tuple[str, int], float] | None = None,
    model_names: list[str] | None = None,
    warm_budget_gib: float | None = None,
    compiled: bool | None = None,
) -> SimResult:
    """Serve `trace` (DataFrame, mapping of arrays or `Requests`) with the instances of `point`.

    `perfs` maps instance id -> InstancePerf. `sleep_after_idle_s`: host/disk instances also
    sleep after that long with nothing to do, outside their awake hours (default: the
    point's `idle_sleep_s`). A wake displaces only as many co-tenants as GPU memory
    (`gpu_memory_gib` per (node, device), default: the point's `gpu_usable_gib`) requires;
    `policy` (`serving_rule.EvictionPolicy` or its name) orders them: `serving_rule.LRU` takes the
    least recently used first and `warm_budget_gib` also caps the warm memory of the whole
    point (see `Router`). The point's `substitutes` send requests to stand-ins
    (`serving_rule.substitute`). `compiled`: run engines on the numba loop (`kernel`, same
    numbers; default: when numba is installed) or on the pure-Python reference.
    `model_names` fixes the model order of the per-model figures (default: the point's
    models, then any others in the trace). Deterministic: no randomness, no clock. Callers
    that simulate one trace many times should convert it once with
    `planner.optimizer.sim.request.to_requests(df, model_names)` and pass that.
    """
    policy = serving_rule.eviction_policy(policy)
    engine_cls = _engine_class(compiled)
    names = list(model_names or dict.fromkeys(i.model for i in point.instances))
    if sleep_after_idle_s is None:
        sleep_after_idle_s = point.idle_sleep_s
    if gpu_memory_gib is None and not policy.reactive:
        gpu_memory_gib = {
            (node, d): gib for node, devs in point.gpu_usable_gib.items() for d, gib in devs.items()
        }
    req = to_requests(trace, names)
    args = (point, perfs, trace, req, slo, sleep_after_idle_s, policy, gpu_memory_gib)
    budget = warm_budget_gib if policy.reactive else None
    res, wrong = _serve(*args, budget, engine_cls, frozenset())
    if wrong:  # rare: a lone instance's refusals took the prefix its later calls counted on
        res, _ = _serve(*args, budget, engine_cls, wrong)
    return res


# `simulate`'s inputs passed on as they are
def _serve(  # noqa: PLR0913
    point: Point,
    perfs: dict[str, InstancePerf],
    trace: Any,
    req: Requests,
    slo: Slo,
    sleep_after_idle_s: float | None,
    policy: serving_rule.EvictionPolicy,
    gpu_memory_gib: dict[tuple[str, int], float] | None,
    warm_budget_gib: float | None,
    engine_cls: type,
    force_routed: frozenset[int],
) -> tuple[SimResult, frozenset[int]]:
    """One run of `simulate`, the models in `force_routed` on the router's path even where a
    fast path would serve them; and the models a lone instance served wrongly
    (`alone.refusals_left_hits`), to run again that way."""
    n = len(req)
    out = Outcome.empty(n)
    t0 = float(req.arrival_s[0]) if n else 0.0
    midx = {m: k for k, m in enumerate(req.model_names)}
    slots, by_model = point_slots(point, perfs, midx, engine_cls, out)
    subs = substitutes(point, slots, by_model, midx)
    handoff = {} if policy.reactive else handoffs(point, midx)
    # Stand-ins take requests of other models, a hand-off wakes other models: every model of
    # a rule goes through the router.
    routed_models = set(subs) | {c.model for _, cs in subs.values() for c, _ in cs}
    routed_models |= set(handoff) | {b for bs in handoff.values() for b in bs}
    timeline = Timeline(start_s=t0)
    router = Router(
        slots,
        by_model,
        timeline,
        policy=policy,
        gpu_memory_gib=gpu_memory_gib,
        idle_timeout_s=sleep_after_idle_s,
        warm_budget_gib=warm_budget_gib,
        substitutes=subs,
        handoff=handoff,
        switch_slo_s={k: slo.for_model(m).switch_p95_s for m, k in midx.items()},
    )
    router.start(t0)
    paths = _Paths(req, trace is req, perfs, slots, router, out, force_routed | routed_models)
    for m in range(len(req.model_names)):
        paths.serve_model(m, by_model.get(m, []), engine_cls)
    if paths.routed:
        admit = Admission(slots, router.cands, perfs, out.refused)
        order = np.sort(np.concatenate(paths.routed))
        _run_routed(order, req, out, slots, router, paths.local, paths.lone, perfs, admit)
    for s in slots:
        s.engine.drain()
    done = out.finish_s[np.isfinite(out.finish_s)]
    end_s = max(float(done.max()) if len(done) else t0, float(req.arrival_s[-1]) if n else t0)
    router.settle_until(end_s)
    timeline.close(end_s)
    res = measure(point, req, out, slots, timeline, t0, end_s, slo, paths.over, out.refused)
    return res, frozenset(paths.wrong)


class _Paths:
    """Each model's requests onto its path: refused over the context limit, served at once
    (an instance alone with its model; gpu-tier replicas on the compiled engine), or left
    for the router (`routed`, with each request's position among its model's `local` and
    the `lone` times of each slot)."""

    def __init__(
        self,
        req: Requests,
        memo: bool,
        perfs: dict[str, InstancePerf],
        slots: list[Slot],
        router: Router,
        out: Outcome,
        keep_routed: set[int] | frozenset[int],
    ) -> None:
        n = len(req)
        self.req = req
        self.memo = memo
        self.perfs = perfs
        self.slots = slots
        self.router = router
        self.out = out
        self.keep_routed = keep_routed
        self.over = np.zeros(n, dtype=bool)  # refused: the prompt leaves no room in max_model_len
        self.routed: list[np.ndarray] = []  # requests that go through the router
        self.local = np.zeros(n, dtype=np.int64)  # position among its model's requests
        self.lone: dict[int, tuple[list[float], ...]] = {}  # slot -> lone times (router path)
        self.wrong: set[int] = set()  # models `alone` served wrongly (`refusals_left_hits`)

    def serve_model(self, m: int, cands: list[int], engine_cls: type) -> None:
        """Model `m`'s requests (served by the slots `cands`) onto their path."""
        req = self.req
        perfs = self.perfs
        slots = self.slots
        out = self.out
        idx = np.flatnonzero(req.model == m)
        if not len(idx) or not cands:
            return  # unserved requests stay failed
        lim = max(perfs[slots[i].id].max_model_len for i in cands)
        if lim > 0:  # vLLM refuses a prompt that leaves no room for one output token
            refused = req.input_tokens[idx] >= lim
            self.over[idx[refused]] = True
            idx = idx[~refused]
            if not len(idx):
                return
        self.local[idx] = np.arange(len(idx))
        inp = req.input_tokens[idx]
        cached = req.cached_tokens[idx]
        outk = req.output_tokens[idx]
        s0 = slots[cands[0]]
        bound = never_sleeping_bound([perfs[slots[i].id] for i in cands])
        if len(cands) == 1 and m not in self.keep_routed and self._alone(s0):
            self._serve_alone(m, s0, idx, inp, cached, outk, bound)
            return
        if (
            engine_cls is not Engine
            and m not in self.keep_routed
            and all(slots[i].tier == "gpu" for i in cands)
        ):
            from planner.optimizer.sim.replicas import run_replicas  # compiled path: numba

            run_replicas(
                [slots[i] for i in cands], m, idx, req, out, perfs, memo=self.memo, bound=bound
            )
            return
        for i in cands:
            pair = lone_pair(req, m, perfs[slots[i].id], inp, cached, outk, self.memo)
            self.lone[i] = tuple(a.tolist() for a in pair)
        self.routed.append(idx)

    def _alone(self, s: Slot) -> bool:
        """The model's only instance sees exactly its requests: nothing ever displaces it."""
        r = self.router
        return s.tier == "gpu" or (
            not r.overlaps[s.index]
            and r.idle_timeout_s is None
            and not s.hours
            and r.warm_budget_gib is None  # a budget displaces across GPUs
            and s.awake
        )

    def _serve_alone(self, m: int, s0: Slot, idx, inp, cached, outk, bound: int) -> None:
        """Serve a lone instance's requests (`alone`), remembered for a trace kept around."""
        req = self.req
        out = self.out
        memo = self.memo
        perf = self.perfs[s0.id]
        key = (req.fingerprint, m, perf) if memo else ()  # a passing trace: not hashed
        if not (memo and alone.recall(key, s0, idx, out)):
            # which requests find their prefix cached is known up front
            hit = alone.session_hits(req.session[idx], cached)
            pf, tot = lone_times_of(
                req, m, perf, "sessions", inp, np.where(hit, cached, 0), outk, memo=memo
            )
            alone.run_alone(s0, idx, req, out, hit, pf, tot, bound)
            if memo:
                alone.remember(key, s0, idx, out)
        if alone.refusals_left_hits(req, idx, out):
            self.wrong.add(m)


def _engine_class(compiled: bool | None) -> type:
    """The compiled engine when asked (or by default, when numba is installed), else the
    pure-Python one; numba is imported only here (it takes a second)."""
    if compiled is False:
        return Engine
    try:
        from planner.optimizer.sim.fastengine import FastEngine
        from planner.optimizer.sim.kernel import AVAILABLE
    except ImportError:
        AVAILABLE = False
    if not AVAILABLE:
        if compiled:
            raise ValueError("the compiled simulator engine needs numba (pip install numba)")
        return Engine
    return FastEngine


def clear_caches() -> None:
    """Forget what earlier simulations remembered about their traces (cold timings)."""
    alone.clear()
    lonememo.clear()


def _run_routed(
    order: np.ndarray,
    req: Requests,
    out: Outcome,
    slots: list[Slot],
    router: Router,
    local: np.ndarray,
    lone: dict[int, tuple[list[float], ...]],
    perfs: dict[str, InstancePerf],
    admit: Admission,
) -> None:
    """Requests of routed models, one by one in arrival order; refused ones stay unserved."""
    arrival = req.arrival_s[order].tolist()
    model = req.model[order].tolist()
    inp = req.input_tokens[order].tolist()
    outk = req.output_tokens[order].tolist()
    cached = req.cached_tokens[order].tolist()
    sess = req.session[order].tolist()
    loc = local[order].tolist()
    rids = order.tolist()
    wait = out.switch_wait_s
    inst_of = out.instance
    hits = out.cache_hit
    route = router.route
    full = admit.full
    refused = admit.refused
    sent = admit.sent
    for q, rid in enumerate(rids):
        t = arrival[q]
        if full(model[q], t):
            refused[rid] = True
            continue
        i, t_in, penalty = route(model[q], t)
        s = slots[i]
        t_in += s.engine_delay_s
        inst_of[rid] = i
        sent(i)  # each branch below submits it to slot i
        if penalty >= 0:  # a stand-in answers: its own lone times, no prefix of this session
            out.substituted[rid] = True
            out.quality_penalty[rid] = penalty
            pf, tot = lone_times(
                perfs[s.id], np.array([inp[q]]), np.zeros(1, np.int64), np.array([outk[q]])
            )
            s.engine.submit(rid, t_in, inp[q], 0, outk[q], float(pf[0]), float(tot[0]))
            continue
        if t_in > t + s.engine_delay_s:
            wait[rid] = t_in - t - s.engine_delay_s
        j = loc[q]
        key = sess[q]
        c = cached[q]
        pf_m, tot_m, pf_h, tot_h = lone[i]
        if key >= 0:
            last = s.cache.get(key)
            if c and last is not None:
                if last == s.epoch:  # still in the GPU KV cache
                    hits[rid] = True
                    s.engine.submit(rid, t_in, inp[q], c, outk[q], pf_h[j], tot_h[j])
                    continue
                if c <= s.offload_tokens:  # survived the sleep in the CPU KV tier
                    hits[rid] = True
                    s.cache[key] = s.epoch
                    t_load = t_in + c * s.h2d_s_per_token
                    s.engine.submit(rid, t_load, inp[q], c, outk[q], pf_h[j], tot_h[j])
                    continue
            s.cache[key] = s.epoch
        s.engine.submit(rid, t_in, inp[q], 0, outk[q], pf_m[j], tot_m[j])


__all__ = ["SimResult", "simulate"]
