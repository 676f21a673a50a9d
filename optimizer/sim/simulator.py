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

from planner.optimizer import tiering
from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.sim import alone, lonememo
from planner.optimizer.sim.admit import Admission, over_bound
from planner.optimizer.sim.event import Timeline
from planner.optimizer.sim.instance import Engine
from planner.optimizer.sim.lonememo import lone_pair, lone_times_of
from planner.optimizer.sim.metrics import SimResult, met_slo
from planner.optimizer.sim.request import Outcome, Requests, to_requests
from planner.optimizer.sim.router import Router, Slot
from planner.optimizer.sim.steptime import lone_times
from planner.schemas.plan import Point
from planner.schemas.slo import Slo
from planner.units import GIB

POLICIES = ("plan", "lru")


def simulate(
    point: Point,
    perfs: dict[str, InstancePerf],
    trace: Any,
    slo: Slo,
    *,
    sleep_after_idle_s: float | None = None,
    policy: str = "plan",
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
    `policy="lru"` takes the least recently used first and `warm_budget_gib` also caps the
    warm memory of the whole point (see `Router`). The point's `substitutes` send requests
    to stand-ins (`tiering.substitute`). `compiled`: run engines on the numba loop (`kernel`, same numbers;
    default: when numba is installed) or on the pure-Python reference. `model_names` fixes the model order of the per-model figures
    (default: the point's models, then any others in the trace). Deterministic: no
    randomness, no clock. Callers that simulate one trace many times should convert it
    once with `planner.optimizer.sim.request.to_requests(df, model_names)` and pass that.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
    engine_cls = _engine_class(compiled)
    names = list(model_names or dict.fromkeys(i.model for i in point.instances))
    if sleep_after_idle_s is None:
        sleep_after_idle_s = point.idle_sleep_s
    if gpu_memory_gib is None and policy == "plan":
        gpu_memory_gib = {
            (node, d): gib for node, devs in point.gpu_usable_gib.items() for d, gib in devs.items()
        }
    req = to_requests(trace, names)
    args = (point, perfs, trace, req, slo, sleep_after_idle_s, policy, gpu_memory_gib)
    res = _serve(*args, warm_budget_gib, engine_cls, frozenset())
    full = over_bound(point, perfs, res)
    if full:  # the gateway would have refused some: those models again, admission on
        res = _serve(*args, warm_budget_gib, engine_cls, full)
    return res


def _serve(
    point: Point,
    perfs: dict[str, InstancePerf],
    trace: Any,
    req: Requests,
    slo: Slo,
    sleep_after_idle_s: float | None,
    policy: str,
    gpu_memory_gib: dict[tuple[str, int], float] | None,
    warm_budget_gib: float | None,
    engine_cls: type,
    force_routed: frozenset[int],
) -> SimResult:
    """One run of `simulate`; the models in `force_routed` take the router's path (the one
    that admits request by request) even where the fast paths would serve them."""
    n = len(req)
    out = Outcome.empty(n)
    t0 = float(req.arrival_s[0]) if n else 0.0
    midx = {m: k for k, m in enumerate(req.model_names)}

    slots: list[Slot] = []
    by_model: dict[int, list[int]] = {}
    missing = [i.id for i in point.instances if i.id not in perfs]
    if missing:
        raise ValueError(f"no InstancePerf for instances {missing} (see perfs_for_point)")
    for k, ins in enumerate(point.instances):
        perf = perfs[ins.id]
        m = midx.get(ins.model, -1)
        wake_s = 0.0 if ins.tier == "gpu" else perf.wake_s(ins.tier)
        gpus = tuple((ins.node, g) for g in ins.gpus) or ((ins.node, -1 - k),)
        slots.append(
            Slot(
                index=k,
                id=ins.id,
                model=m,
                tier=ins.tier,
                gpus=gpus,
                awake_gib=perf.awake_gib_per_gpu,
                context_gib=perf.context_gib_per_gpu,
                wake_s=wake_s,
                sleep_s=perf.sleep_s,
                engine_delay_s=perf.prefill_overhead_s,
                engine=engine_cls(perf, out.first_token_s, out.finish_s),
                offload_tokens=_offload_tokens(ins.kv_cpu_offload_gib, perf),
                h2d_s_per_token=_h2d_s_per_token(perf),
                hours=frozenset(ins.awake_hours),
                variant=ins.variant,
            )
        )
        by_model.setdefault(m, []).append(k)
    subs = _substitutes(point, slots, by_model, midx)
    handoff = {
        midx[a]: [midx[b] for b in bs if b in midx]
        for a, bs in point.handoff.items()
        if a in midx and policy == "plan"
    }
    handoff = {a: bs for a, bs in handoff.items() if bs}
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
        warm_budget_gib=warm_budget_gib if policy == "lru" else None,
        substitutes=subs,
        handoff=handoff,
        switch_slo_s={k: slo.for_model(m).switch_p95_s for m, k in midx.items()},
    )
    router.start(t0)

    over = np.zeros(n, dtype=bool)  # refused: the prompt leaves no room in max_model_len
    routed: list[np.ndarray] = []  # requests that go through the router
    local = np.zeros(n, dtype=np.int64)  # position of a request among its model's requests
    lone: dict[int, tuple[list[float], ...]] = {}  # slot -> lone times for the router path
    for m in range(len(req.model_names)):
        idx = np.flatnonzero(req.model == m)
        cands = by_model.get(m, [])
        if not len(idx) or not cands:
            continue  # unserved requests stay failed
        lim = max(perfs[slots[i].id].max_model_len for i in cands)
        if lim > 0:  # vLLM refuses a prompt that leaves no room for one output token
            refused = req.input_tokens[idx] >= lim
            over[idx[refused]] = True
            idx = idx[~refused]
            if not len(idx):
                continue
        local[idx] = np.arange(len(idx))
        inp, cached, outk = req.input_tokens[idx], req.cached_tokens[idx], req.output_tokens[idx]
        s0 = slots[cands[0]]
        by_itself = (
            len(cands) == 1
            and m not in force_routed
            and m not in routed_models
            and (
                s0.tier == "gpu"
                or (
                    not router.overlaps[s0.index]
                    and sleep_after_idle_s is None
                    and not s0.hours
                    and router.warm_budget_gib is None  # a budget displaces across GPUs
                    and s0.awake
                )
            )
        )
        key = (id(req), m, perfs[s0.id])
        memo = trace is req  # a trace the caller keeps: worth remembering things about
        if by_itself and memo and alone.recall(key, req, s0, idx, out):
            continue
        if by_itself:  # which requests find their prefix cached is known up front
            hit = alone.session_hits(req.session[idx], cached)
            pf, tot = lone_times_of(
                req, m, perfs[s0.id], "sessions", inp, np.where(hit, cached, 0), outk, memo=memo
            )
            alone.run_alone(s0, idx, req, out, hit, pf, tot)
            if memo:
                alone.remember(key, req, s0, idx, out)
            continue
        if (
            engine_cls is not Engine
            and m not in routed_models
            and m not in force_routed
            and all(slots[i].tier == "gpu" for i in cands)
        ):
            from planner.optimizer.sim.replicas import run_replicas  # compiled path: numba

            run_replicas([slots[i] for i in cands], m, idx, req, out, perfs, memo=memo)
            continue
        for i in cands:
            lone[i] = tuple(
                a.tolist() for a in lone_pair(req, m, perfs[slots[i].id], inp, cached, outk, memo)
            )
        routed.append(idx)

    queue_full = np.zeros(n, dtype=bool)  # refused: the model's admission bound was reached
    if routed:
        admit = Admission(slots, by_model, perfs, queue_full)
        order = np.sort(np.concatenate(routed))
        _run_routed(order, req, out, slots, router, local, lone, perfs, admit)

    for s in slots:
        s.engine.drain()
    done = out.finish_s[np.isfinite(out.finish_s)]
    end_s = max(float(done.max()) if len(done) else t0, float(req.arrival_s[-1]) if n else t0)
    router.settle_until(end_s)
    timeline.close(end_s)
    return _result(point, req, out, slots, timeline, t0, end_s, slo, over, queue_full)


def _substitutes(
    point: Point, slots: list[Slot], by_model: dict[int, list[int]], midx: dict[str, int]
) -> dict[int, tuple[Any, list[tuple[Slot, float]]]]:
    """model index -> (its substitute rule, the stand-in slots and their quality penalty),
    for the models of the point's rules that are in the trace and have a stand-in."""
    out = {}
    for name, rule in point.substitutes.items():
        if name not in midx:
            continue

        def instances_of(model: str) -> list[Slot]:
            return [slots[i] for i in by_model.get(midx.get(model, -2), [])]

        cands = tiering.stand_ins(rule, instances_of, lambda s: s.variant)
        if cands:
            out[midx[name]] = (rule, cands)
    return out


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


def _offload_tokens(kv_cpu_offload_gib: float, perf: InstancePerf) -> float:
    """Prefix tokens the instance's CPU KV tier holds (0: none)."""
    if kv_cpu_offload_gib <= 0 or perf.kv_bytes_per_token <= 0:
        return 0.0
    return kv_cpu_offload_gib * GIB / perf.kv_bytes_per_token  # GiB -> bytes -> tokens


def _h2d_s_per_token(perf: InstancePerf) -> float:
    """Seconds to bring one token's KV back from host RAM, at the rate a level-1 wake
    moves weights (wake_host_s for weights_host_gib, fixed costs included)."""
    if perf.weights_host_gib <= 0 or perf.wake_host_s <= 0:
        return 0.0
    return perf.wake_host_s / (perf.weights_host_gib * GIB) * perf.kv_bytes_per_token  # s/token


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
    full, refused = admit.full, admit.refused
    for q, rid in enumerate(rids):
        t = arrival[q]
        if full(model[q], t):
            refused[rid] = True
            continue
        i, t_in, penalty = route(model[q], t)
        s = slots[i]
        t_in += s.engine_delay_s
        inst_of[rid] = i
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


def _result(
    point: Point,
    req: Requests,
    out: Outcome,
    slots: list[Slot],
    timeline: Timeline,
    t0: float,
    end_s: float,
    slo: Slo,
    over_context: np.ndarray,
    queue_full: np.ndarray,
) -> SimResult:
    a = req.arrival_s
    ttft = out.first_token_s - a
    e2e = out.finish_s - a
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(
            req.output_tokens > 1,
            (out.finish_s - out.first_token_s) / (req.output_tokens - 1),
            np.nan,
        )
    met = met_slo(req.model, req.model_names, ttft, tpot, out.switch_wait_s, slo)
    duration_s = max(end_s - t0, 1e-9)
    gib_s = 0.0  # GiB x seconds held
    awake_gib: dict[int, float] = {}
    asleep_gib: dict[int, float] = {}
    for s in slots:
        tp = len(s.gpus)
        awake_gib[s.index] = s.awake_gib * tp
        asleep_gib[s.index] = s.context_gib * tp if s.tier != "gpu" else 0.0
        up = timeline.awake_s(s.index, end_s)
        gib_s += up * awake_gib[s.index] + max(duration_s - up, 0.0) * asleep_gib[s.index]
    curve = timeline.curve(awake_gib, asleep_gib, end_s)
    # An empty trace has no span: report what is held at the start.
    held_gib = sum(awake_gib[s.index] if s.awake else asleep_gib[s.index] for s in slots)
    avg_gib = gib_s / duration_s if end_s > t0 else held_gib
    gpus = {g for s in slots for g in s.gpus}
    busy_gpu_s = sum(s.engine.busy_s * len(s.gpus) for s in slots)
    return SimResult(
        model_names=req.model_names,
        arrival_s=a,
        model=req.model,
        instance=out.instance,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        switch_wait_s=out.switch_wait_s,
        met_slo=met,
        cache_hit=out.cache_hit,
        instance_ids=tuple(s.id for s in slots),
        start_s=t0,
        end_s=end_s,
        warm_gpu_gib_hours=gib_s / 3600.0,
        warm_gpu_gib=avg_gib,
        wakes=timeline.count("wake"),
        sleeps=timeline.count("sleep"),
        wakes_by_instance=tuple(s.wakes for s in slots),
        gpu_busy_fraction=min(busy_gpu_s / (len(gpus) * duration_s), 1.0) if gpus else 0.0,
        gpus_used=len(gpus),
        preemptions=sum(s.engine.preemptions for s in slots),
        memory_curve=curve,
        instance_models=tuple(s.model for s in slots),
        over_context=over_context,
        queue_full=queue_full,
        substituted=out.substituted,
        quality_penalty=out.quality_penalty,
    )


__all__ = ["POLICIES", "SimResult", "simulate"]
