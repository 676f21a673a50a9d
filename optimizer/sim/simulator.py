"""`simulate`: replay a trace against one plan point and measure what users would feel.

Two paths, the same engine:
- an instance that is the only one of its model and can never be displaced (gpu tier, or a
  host/disk instance with no host/disk co-tenant and no idle timeout) sees exactly its
  model's requests at their arrival times. Its requests are computed with numpy: all as
  lone requests, then only the busy periods (a request arriving before the previous one
  finished) are re-run through the batch engine;
- every other request goes through the router one by one in arrival order (wakes,
  co-tenant drains, least-loaded routing), and its instance's engine either takes it as a
  lone request (closed form) or simulates the batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.sim.event import Timeline
from planner.optimizer.sim.instance import Engine, lone_times
from planner.optimizer.sim.metrics import SimResult, met_slo
from planner.optimizer.sim.request import Outcome, Requests, to_requests
from planner.optimizer.sim.router import Router, Slot
from planner.schemas.plan import Point
from planner.schemas.slo import Slo

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
) -> SimResult:
    """Serve `trace` (DataFrame, mapping of arrays or `Requests`) with the instances of `point`.

    `perfs` maps instance id -> InstancePerf. `sleep_after_idle_s`: host/disk instances also
    sleep after that long with nothing to do. `policy="lru"` lets a wake displace only as
    many co-tenants as GPU memory (`gpu_memory_gib` per (node, device)) requires, least
    recently used first. Deterministic: no randomness, no clock.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
    names = list(model_names or dict.fromkeys(i.model for i in point.instances))
    req = to_requests(trace, names)
    n = len(req)
    out = Outcome.empty(n)
    t0 = float(req.arrival_s[0]) if n else 0.0
    midx = {m: k for k, m in enumerate(req.model_names)}

    slots: list[Slot] = []
    by_model: dict[int, list[int]] = {}
    for k, ins in enumerate(point.instances):
        perf = perfs[ins.id]
        m = midx.get(ins.model, -1)
        wake_s = {"gpu": 0.0, "host": perf.wake_host_s, "disk": perf.wake_disk_s}[ins.tier]
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
                engine=Engine(perf, out.first_token_s, out.finish_s),
            )
        )
        by_model.setdefault(m, []).append(k)
    timeline = Timeline(start_s=t0)
    router = Router(
        slots,
        by_model,
        timeline,
        policy=policy,
        gpu_memory_gib=gpu_memory_gib,
        idle_timeout_s=sleep_after_idle_s,
    )
    router.start(t0)

    routed: list[np.ndarray] = []  # requests that go through the router
    local = np.zeros(n, dtype=np.int64)  # position of a request among its model's requests
    lone: dict[int, tuple[list[float], ...]] = {}  # slot -> lone times for the router path
    for m in range(len(req.model_names)):
        idx = np.flatnonzero(req.model == m)
        cands = by_model.get(m, [])
        if not len(idx) or not cands:
            continue  # unserved requests stay failed
        local[idx] = np.arange(len(idx))
        inp, cached, outk = req.input_tokens[idx], req.cached_tokens[idx], req.output_tokens[idx]
        s0 = slots[cands[0]]
        alone = len(cands) == 1 and (
            s0.tier == "gpu"
            or (not router.overlaps[s0.index] and sleep_after_idle_s is None and s0.awake)
        )
        for i in cands:
            perf = perfs[slots[i].id]
            pf_m, tot_m = lone_times(perf, inp, np.zeros_like(cached), outk)
            if cached.any():
                pf_h, tot_h = lone_times(perf, inp, cached, outk)
            else:
                pf_h, tot_h = pf_m, tot_m
            if alone:
                _run_alone(slots[i], idx, req, out, pf_m, tot_m, pf_h, tot_h)
            else:
                lone[i] = (pf_m.tolist(), tot_m.tolist(), pf_h.tolist(), tot_h.tolist())
        if not alone:
            routed.append(idx)

    if routed:
        _run_routed(np.sort(np.concatenate(routed)), req, out, slots, router, local, lone)

    for s in slots:
        s.engine.drain()
    done = out.finish_s[np.isfinite(out.finish_s)]
    end_s = max(float(done.max()) if len(done) else t0, float(req.arrival_s[-1]) if n else t0)
    if sleep_after_idle_s is not None:
        for s in slots:
            if s.awake and s.tier != "gpu":
                idle_since = max(s.engine.free_s, s.ready_s)
                if idle_since + sleep_after_idle_s < end_s:
                    router._sleep(s, idle_since + sleep_after_idle_s)
    timeline.close(end_s)
    return _result(point, req, out, slots, timeline, t0, end_s, slo)


def _run_alone(
    s: Slot,
    idx: np.ndarray,
    req: Requests,
    out: Outcome,
    pf_m: np.ndarray,
    tot_m: np.ndarray,
    pf_h: np.ndarray,
    tot_h: np.ndarray,
) -> None:
    """All requests of a model on its one never-displaced instance, vectorized."""
    ta = req.arrival_s[idx] + s.engine_delay_s
    sess = req.session[idx]
    seen = np.zeros(len(idx), dtype=bool)  # an earlier call of the same session exists
    known = np.flatnonzero(sess >= 0)
    if len(known):
        _, first = np.unique(sess[known], return_index=True)
        seen[known] = True
        seen[known[first]] = False
    hit = seen & (req.cached_tokens[idx] > 0)
    cached = np.where(hit, req.cached_tokens[idx], 0)
    pf = np.where(hit, pf_h, pf_m)
    tot = np.where(hit, tot_h, tot_m)
    out.first_token_s[idx] = ta + pf
    out.finish_s[idx] = ta + tot
    out.instance[idx] = s.index
    out.cache_hit[idx] = hit
    # Busy periods: request j+1 arrives before request j (alone) would have finished.
    overlap = np.flatnonzero(ta[1:] < ta[:-1] + tot[:-1])
    in_busy = np.zeros(len(idx), dtype=bool)
    eng = s.engine
    nxt = 0
    p = 0
    inp, outk = req.input_tokens[idx], req.output_tokens[idx]
    while p < len(overlap):
        j = int(overlap[p])
        k = j
        while k < len(idx):
            tk = float(ta[k])
            if k > j:
                if eng.general:
                    eng.advance_to(tk)
                if not eng.general and eng.free_s <= tk:
                    break
            eng.submit(
                int(idx[k]), tk, int(inp[k]), int(cached[k]), int(outk[k]), float(pf[k]), float(tot[k])
            )
            in_busy[k] = True
            k += 1
        eng.drain()
        nxt = k
        p = int(np.searchsorted(overlap, nxt))
    eng.busy_s += float(tot[~in_busy].sum())
    eng.free_s = max(eng.free_s, float((ta + tot)[-1]) if len(idx) else eng.free_s)


def _run_routed(
    order: np.ndarray,
    req: Requests,
    out: Outcome,
    slots: list[Slot],
    router: Router,
    local: np.ndarray,
    lone: dict[int, tuple[list[float], ...]],
) -> None:
    """Requests of routed models, one by one in arrival order."""
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
    for q, rid in enumerate(rids):
        t = arrival[q]
        i, t_in = route(model[q], t)
        s = slots[i]
        t_in += s.engine_delay_s
        if t_in > t + s.engine_delay_s:
            wait[rid] = t_in - t - s.engine_delay_s
        inst_of[rid] = i
        j = loc[q]
        key = sess[q]
        c = cached[q]
        pf_m, tot_m, pf_h, tot_h = lone[i]
        if key >= 0:
            if c and s.cache.get(key) == s.epoch:
                hits[rid] = True
                s.engine.submit(rid, t_in, inp[q], c, outk[q], pf_h[j], tot_h[j])
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
) -> SimResult:
    a = req.arrival_s
    ttft = out.first_token_s - a
    e2e = out.finish_s - a
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(req.output_tokens > 1, (out.finish_s - out.first_token_s) / (req.output_tokens - 1), np.nan)
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
        warm_gpu_gib=gib_s / duration_s,
        wakes=timeline.count("wake"),
        sleeps=timeline.count("sleep"),
        wakes_by_instance=tuple(s.wakes for s in slots),
        gpu_busy_fraction=min(busy_gpu_s / (len(gpus) * duration_s), 1.0) if gpus else 0.0,
        gpus_used=len(gpus),
        preemptions=sum(s.engine.preemptions for s in slots),
        memory_curve=timeline.curve(awake_gib, asleep_gib, end_s),
        instance_models=tuple(s.model for s in slots),
    )


__all__ = ["POLICIES", "SimResult", "simulate"]
