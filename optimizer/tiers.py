"""Points that share a placement and differ only in tiers, and what a hop between points costs.

A hop between two points of one placement is sleeps and wakes, not restarts (every CUDA
instance runs with sleep mode), so the search offers, beside the MILP's placements, the
tier variants of the selected placement: sleepers promoted to always awake, hottest first,
while the memory invariant holds; always-awake instances demoted to sleep, least
requested first, where a co-tenant sleeper lets them time-share the GPU.
"""

from __future__ import annotations

from collections.abc import Iterable

from planner.optimizer.demand import ModelDemand
from planner.optimizer.invariants import memory_violations
from planner.optimizer.perf.types import InstancePerf
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Hop, Instance, Point


def _fits(point: Point, cluster: Cluster, gpu_margin: float, host_margin: float) -> bool:
    return not memory_violations(point, cluster, gpu_margin=gpu_margin, host_margin=host_margin)


def _with_tier(point: Point, inst_id: str, tier: str) -> Point:
    return point.model_copy(
        update={
            "instances": [
                i.model_copy(update={"tier": tier}) if i.id == inst_id else i
                for i in point.instances
            ]
        }
    )


def _shares_with_sleeper(point: Point, inst: Instance) -> bool:
    mine = {(inst.node, g) for g in inst.gpus}
    return any(
        o.id != inst.id and o.tier != "gpu" and mine & {(o.node, g) for g in o.gpus}
        for o in point.instances
    )


def tier_variants(
    point: Point,
    demand: dict[str, ModelDemand],
    sleep_order: list[str],
    cluster: Cluster,
    *,
    gpu_margin: float,
    host_margin: float,
) -> list[Point]:
    """Variants of `point` with the same instances and other tiers (module docstring), each
    one step further along its chain; every one satisfies the memory invariant."""

    def heat(i: Instance) -> float:
        d = demand.get(i.model)
        return d.switch_ins_per_hour if d else 0.0

    out: list[Point] = []
    cur = point
    for inst in sorted((i for i in point.instances if i.tier != "gpu"), key=lambda i: -heat(i)):
        cand = _with_tier(cur, inst.id, "gpu")
        if _fits(cand, cluster, gpu_margin, host_margin):
            cur = cand
            out.append(cur)
    rank = {m: k for k, m in enumerate(sleep_order)}
    cur = point
    for inst in sorted(
        (i for i in point.instances if i.tier == "gpu"), key=lambda i: (rank.get(i.model, 0), i.id)
    ):
        for tier in ("host", "disk"):
            cand = _with_tier(cur, inst.id, tier)
            if _fits(cand, cluster, gpu_margin, host_margin):
                cur = cand
                if _shares_with_sleeper(cur, inst):  # alone it would never sleep: same point
                    out.append(cur)
                break
    return out


def _same_process(a: Instance, b: Instance) -> bool:
    """One process serves both (everything but the tier equal)."""
    return a.model_dump(exclude={"tier"}) == b.model_dump(exclude={"tier"})


def hop(src: Point, dst: Point, perfs: dict[str, InstancePerf]) -> Hop:
    """What turning `src` (as running) into `dst` takes, as `apply` would do it: an instance
    of `dst` with no identical process in `src` (same id, everything but the tier equal) is
    a (re)start; an identical one changes tier by a wake (to `gpu`) or a sleep (from `gpu`).
    `cost_s` sums cold starts, wakes and sleeps (`perfs`: `dst`'s instance id -> perf)."""
    have = {i.id: i for i in src.instances}
    restarts = wakes = sleeps = 0
    cost_s = 0.0
    for i in dst.instances:
        p = perfs.get(i.id)
        old = have.get(i.id)
        if old is None or not _same_process(old, i):
            restarts += 1
            cost_s += p.cold_start_s if p else 0.0
        elif old.tier != "gpu" and i.tier == "gpu":
            wakes += 1
            cost_s += p.wake_s(old.tier) if p else 0.0
        elif old.tier == "gpu" and i.tier != "gpu":
            sleeps += 1
            cost_s += p.sleep_s if p else 0.0
    return Hop(restarts=restarts, wakes=wakes, sleeps=sleeps, cost_s=round(cost_s, 3))


def hop_table(
    points: Iterable[Point], perfs: dict[str, dict[str, InstancePerf]]
) -> dict[str, dict[str, Hop]]:
    """{FROM: {TO: Hop}} for every ordered pair of distinct points (`perfs` by point name)."""
    pts = list(points)
    return {a.name: {b.name: hop(a, b, perfs[b.name]) for b in pts if b is not a} for a in pts}
