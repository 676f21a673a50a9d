"""The ladder: points of one placement that a runtime walks by sleeps and wakes (issue 41).

The adjuster hops between a plan's points as traffic drifts; a hop between points that
put models on other GPUs restarts instances (a minute or more each, during which their
requests wait), so a front of unrelated placements is one it cannot walk. The plan's points
are therefore built as a ladder:

1. The bases: of the front (step 3 of `select`), the point that holds the SLO best over
   every day (then switches least, then keeps least warm), and the leanest point; the
   ladder is built on each one's placement. Kept: the one with at least two rungs, then,
   of those whose best rung holds the SLO as well as the other's (`ATTAINMENT_TIE`), the
   one whose best rung keeps least warm.
2. The rungs: variants of that placement that differ only in tiers, awake hours and the
   idle-sleep rule (`rung_points`): every instance awake; the tier chains of `tiers`; the
   schedule variant at each `awake_min_requests_per_h` and `LEAN_RATES` (and, with
   stand-ins declared, the ones where covered models keep no awake hours); and the first
   schedule variant with its lazy instances kept awake all day one more at a time, busiest
   first, while they fit. A hop between two rungs restarts nothing (`tiers.hop`).
3. The ladder is the front of the rungs that meet the target, less those no better than
   their `lru@` twin, as for the whole front (`select._twin_front`).
4. A point of the front on another placement stays only where it pays for its restarts
   (`pays`): against every rung that switches as fast, holds the SLO as well and costs no
   more quality, the warm GiB it saves, held for a day, must be worth more than the
   restarts of the hop there and back, at `OptimizeConfig.restart_price_gib_h` warm
   GiB-hours per second of restart. The price is the one exchange rate the plan keeps
   between memory and anything else; within the SLO's targets (switch included, as TTFT and
   TPOT) the rungs are ranked by warm memory alone.
5. The quiet rungs (`quiet_points`): traffic falls (a holiday week, half the team away), and
   a point fitted to the usual traffic keeps its models awake for hours nobody comes. For
   each share of `QUIET_SHARES`, variants of the ladder's placement (schedules fitted to
   the traffic times the share, with the sooner idle sleep too, and one with no awake
   hours), those keeping fewer GiB-hours awake than every rung (`awake_gib_h`), are judged
   on the days points are chosen on thinned to that share of their sessions (`thinned`:
   seeded, whole sessions) in batches of `QUIET_BATCH`, leanest first; in the first batch
   that has one, the leanest that meets the SLO's targets there, attains at most
   `QUIET_ATTAINMENT_LOSS` less than the ladder's top rung there, beats its `lru@` twin
   there, and keeps at least `QUIET_MIN_SAVING` less warm than the leanest rung (and the
   quiet rung of the larger share) does there is written as a rung for that share
   (`Point.for_traffic_share`). The adjuster hops to it by sleeps and wakes when its
   forecast falls and leaves it when the forecast rises; it is never the selected point.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from planner.optimizer import scoring
from planner.optimizer.hops import hop, tier_variants, with_tier
from planner.optimizer.invariants import memory_violations
from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.schedule import scheduled
from planner.optimizer.search_context import SearchContext
from planner.optimizer.select_baselines import ATTAINMENT_TIE
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Point

DAY_H = 24.0  # a point off the ladder is judged held for a day
# schedules beyond `awake_min_requests_per_h`: rungs that keep only the busiest hours' models
# awake, for the quiet days the adjuster hops down on
LEAN_RATES = (32.0, 128.0)
MAX_RUNGS = 5  # rungs written at most (thinned evenly along warm GiB, the base kept)
QUIET_SHARES = (0.5, 0.25)  # traffic shares the quiet rungs are judged at (step 5)
QUIET_SEED = 41  # the thinning's seed: the same sessions stay on every run
QUIET_MIN_SAVING = 0.10  # a quiet rung keeps at least this share less warm than every rung
QUIET_ATTAINMENT_LOSS = 0.003  # ... and attains at most this much less than the top rung
# quiet candidates simulated per batch, leanest first: a fixed size, not the worker count,
# so the rung kept is the same on any machine
QUIET_BATCH = 4


def tiers_key(point: Point) -> tuple:
    """What tells two points of one placement apart: tiers, awake hours, idle-sleep rule and
    hand-offs."""
    insts = tuple(sorted((i.id, i.tier, tuple(i.awake_hours)) for i in point.instances))
    hand = tuple(sorted((a, tuple(b)) for a, b in point.handoff.items()))
    return insts, point.idle_sleep_s, hand


def _fits(point: Point, cluster: Cluster, gpu_margin: float, host_margin: float) -> bool:
    return not memory_violations(point, cluster, gpu_margin=gpu_margin, host_margin=host_margin)


def promotions(
    point: Point,
    heat: dict[str, float],
    cluster: Cluster,
    *,
    gpu_margin: float,
    host_margin: float,
) -> list[Point]:
    """`point` with its lazy instances kept awake all day one more at a time, the model that
    switches in most often first (`heat`: model -> switch-ins per hour), each step while the
    memory invariant holds."""
    out: list[Point] = []
    cur = point
    lazy = sorted(
        (i for i in point.instances if i.tier != "gpu"),
        key=lambda i: (-heat.get(i.model, 0), i.id),
    )
    for inst in lazy:
        cand = with_tier(cur, inst.id, "gpu")
        if _fits(cand, cluster, gpu_margin, host_margin):
            cur = cand
            out.append(cur)
    return out


def schedule_variants(ctx: SearchContext) -> list[tuple[frozenset[str], float]]:
    """(models keeping no awake hours, idle sleep s) of the schedule variants: none and
    `idle_sleep_s`; with stand-ins declared, the covered models with no hours, at
    `idle_sleep_s` and at `covered_idle_sleep_s`."""
    cfg = ctx.cfg
    variants = [(frozenset(), cfg.idle_sleep_s)]
    if ctx.substitutes:
        covered = frozenset(ctx.substitutes)
        idle = sorted({cfg.idle_sleep_s, cfg.covered_idle_sleep_s}, reverse=True)
        variants += [(covered, s) for s in idle]
    return variants


def schedule_variant(
    ctx: SearchContext,
    point: Point,
    perfs: dict[str, InstancePerf],
    rate: float,
    asleep: frozenset[str],
    idle_s: float,
    share: float = 1.0,
) -> Point:
    """`point` with awake hours for `rate` requests/h and one of `schedule_variants`
    (`asleep`, `idle_s`): the one call the front's step 2 and the ladder's rungs share;
    `share`: the fitted rates times it (a quiet rung's forecast)."""
    rates = ctx.rates if share == 1.0 else {m: r * share for m, r in ctx.rates.items()}
    return scheduled(
        point,
        perfs,
        rates,
        ctx.cluster,
        min_requests_per_h=rate,
        switch_factor=scoring.TWIN_SWITCH_FACTOR,
        idle_sleep_s=idle_s,
        host_margin=ctx.cfg.host_memory_margin,
        no_hours_for=asleep,
        handoff=ctx.handoff,
    )


def rung_points(ctx: SearchContext, base: Point, perfs: dict[str, InstancePerf]) -> list[Point]:
    """The variants of `base`'s placement (module docstring, step 2), `base` itself and
    duplicates left out, in a deterministic order. `base.gpu_usable_gib` must be set."""
    cfg, cluster = ctx.cfg, ctx.cluster
    margins = {"gpu_margin": cfg.gpu_memory_margin, "host_margin": cfg.host_memory_margin}
    heat = {m: d.switch_ins_per_hour for m, d in ctx.demand.items()}
    out: list[Point] = []
    every_awake = base
    for i in base.instances:
        if i.tier != "gpu":
            every_awake = with_tier(every_awake, i.id, "gpu")
    if every_awake is not base and _fits(every_awake, cluster, **margins):
        out.append(every_awake)
    out += tier_variants(base, ctx.demand, ctx.sleep_order, cluster, **margins)
    top = max(cfg.awake_min_requests_per_h)
    rates = [*cfg.awake_min_requests_per_h, *(r for r in LEAN_RATES if r > top)]
    for k, rate in enumerate(rates):
        for j, (asleep, idle_s) in enumerate(schedule_variants(ctx)):
            sched = schedule_variant(ctx, base, perfs, rate, asleep, idle_s)
            out.append(sched)
            if k == j == 0:  # the steps from the first schedule up to every instance awake
                out += promotions(sched, heat, cluster, **margins)
    return _distinct(out, base)


def _distinct(points: list[Point], base: Point) -> list[Point]:
    """`points` less duplicates and `base` (by `tiers_key`), in their order."""
    seen = {tiers_key(base)}
    kept = []
    for p in points:
        k = tiers_key(p)
        if k not in seen:
            seen.add(k)
            kept.append(p)
    return kept


def as_good(rung: PointMetrics, rung_held: float, p: PointMetrics, p_held: float) -> bool:
    """`rung` switches as fast as `p`, holds the SLO as well over every day (`ATTAINMENT_TIE`)
    and costs no more quality."""
    return (
        rung.switch_p95_s <= p.switch_p95_s + 1e-9
        and rung_held >= p_held - ATTAINMENT_TIE
        and rung.quality_cost <= p.quality_cost + 1e-12
    )


def pays(
    point: Point,
    metrics: PointMetrics,
    held: float,
    perfs: dict[str, InstancePerf],
    rungs: list[tuple[Point, PointMetrics, float, dict[str, InstancePerf]]],
    price_gib_h_per_s: float,
) -> bool:
    """A point off the ladder is worth its restarts (module docstring, step 4): against each
    rung as good as it (`as_good`; `rungs`: point, metrics, attainment over every day, perfs),
    its warm GiB saved over `DAY_H` covers the restart seconds of the hop there and back at
    `price_gib_h_per_s`. With no rung as good it offers what the ladder cannot: it stays."""
    for r_point, r_m, r_held, r_perfs in rungs:
        if not as_good(r_m, r_held, metrics, held):
            continue
        restart_s = hop(r_point, point, perfs).restart_s + hop(point, r_point, r_perfs).restart_s
        saved_gib_h = (r_m.warm_gpu_gib - metrics.warm_gpu_gib) * DAY_H
        if saved_gib_h <= price_gib_h_per_s * restart_s:
            return False
    return True


def thin(items: list, warm, keep=None, most: int = MAX_RUNGS) -> list:
    """At most `most` of `items`, spread evenly along warm GiB (`warm`), the ends and `keep`
    (if given) kept; leanest first."""
    items = sorted(items, key=warm)
    if len(items) <= most:
        return items
    if most < 2:
        return [keep] if keep is not None else items[:most]
    idx = {round(k * (len(items) - 1) / (most - 1)) for k in range(most)}
    out = [e for k, e in enumerate(items) if k in idx or e is keep]
    while len(out) > most:  # `keep` took a place: drop the inner one nearest to it
        inner = [e for e in out[1:-1] if e is not keep]
        pos = items.index(keep)
        out.remove(min(inner, key=lambda e: (abs(items.index(e) - pos), items.index(e))))
    return out


def thinned(trace: Any, share: float, seed: int = QUIET_SEED) -> Any:
    """`trace` with `share` of its sessions (user and session; rows where it has none),
    drawn with `seed`: traffic that fell, its sessions' hand-offs and prefixes kept whole."""
    keys = [c for c in ("user", "session") if c in trace.columns]
    if keys:
        # column-wise concatenation: a row-wise join took seconds
        ids = trace[keys[0]].astype(str)
        for k in keys[1:]:
            ids = ids + "/" + trace[k].astype(str)
        ids = ids.to_numpy()
    else:
        ids = np.arange(len(trace)).astype(str)
    uniq = np.unique(ids)
    rng = np.random.default_rng(seed)
    keep = rng.choice(uniq, size=max(1, round(len(uniq) * share)), replace=False)
    # a hashed lookup: np.isin on strings sorts them, most of the step's time before
    return trace[pd.Series(ids).isin(keep).to_numpy()].reset_index(drop=True)


def quiet_points(
    ctx: SearchContext, base: Point, perfs: dict[str, InstancePerf], share: float
) -> list[Point]:
    """The candidates for a quiet rung at `share` of the traffic (module docstring, step 5):
    the schedule variants fitted to the rates times `share` at each rate and at
    `covered_idle_sleep_s` too, and one where no instance keeps awake hours; leanest first
    (`awake_gib_h`, then idle sleep). The full-traffic rung variants are left out: they keep
    awake what the fitted rates ask, which the ladder's rungs already offer."""
    cfg = ctx.cfg
    idles = sorted({cfg.idle_sleep_s, cfg.covered_idle_sleep_s}, reverse=True)
    rates = [*cfg.awake_min_requests_per_h, *LEAN_RATES]
    every = frozenset(i.model for i in base.instances)
    out = [
        schedule_variant(ctx, base, perfs, rate, frozenset(), idle_s, share)
        for rate in rates
        for idle_s in idles
    ]
    out += [schedule_variant(ctx, base, perfs, rates[0], every, idle_s) for idle_s in idles]
    # a stable sort: ties keep the order above
    return sorted(_distinct(out, base), key=lambda p: (awake_gib_h(p), p.idle_sleep_s))


def awake_gib_h(point: Point) -> float:
    """GPU GiB-hours a day that `point`'s tiers and awake hours keep awake, before any wake
    for a request: what orders the quiet candidates without simulating them."""
    total = 0.0
    for i in point.instances:
        hours = 24 if i.tier == "gpu" else len(i.awake_hours)
        gib = i.memory_gib.weights + i.memory_gib.kv + i.memory_gib.overhead
        total += gib * i.tp * hours
    return total
