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


def with_tier(point: Point, inst_id: str, tier: str) -> Point:
    """`point` with instance `inst_id` in `tier` (always awake in `gpu`: no awake hours)."""
    hours = {"awake_hours": []} if tier == "gpu" else {}
    return point.model_copy(
        update={
            "instances": [
                i.model_copy(update={"tier": tier, **hours}) if i.id == inst_id else i
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
        cand = with_tier(cur, inst.id, "gpu")
        if _fits(cand, cluster, gpu_margin, host_margin):
            cur = cand
            out.append(cur)
    rank = {m: k for k, m in enumerate(sleep_order)}
    cur = point
    for inst in sorted(
        (i for i in point.instances if i.tier == "gpu"), key=lambda i: (rank.get(i.model, 0), i.id)
    ):
        for tier in ("host", "disk"):
            cand = with_tier(cur, inst.id, tier)
            if _fits(cand, cluster, gpu_margin, host_margin):
                cur = cand
                if _shares_with_sleeper(cur, inst):  # alone it would never sleep: same point
                    out.append(cur)
                break
    return out


# Instance fields a running process does not depend on: its tier (the same process serves
# every tier, by sleeps and wakes), the hours it is woken ahead (the gateway's schedule) and
# what the plan file notes for its readers. Two points whose instances differ only in these
# share their placement: a hop between them restarts nothing.
NOT_PROCESS = frozenset({"tier", "awake_hours", "gpu_type", "shares_gpu_with"})


def _same_process(a: Instance, b: Instance) -> bool:
    """One process serves both (everything but `NOT_PROCESS` equal)."""
    return a.model_dump(exclude=NOT_PROCESS) == b.model_dump(exclude=NOT_PROCESS)


def placement_key(point: Point) -> tuple:
    """What a point's processes are (`NOT_PROCESS` left out), in a comparable form: points
    with equal keys share their placement."""
    return tuple(
        sorted(repr(sorted(i.model_dump(exclude=NOT_PROCESS).items())) for i in point.instances)
    )


def hop(src: Point, dst: Point, perfs: dict[str, InstancePerf]) -> Hop:
    """What turning `src` (as running) into `dst` takes, as `apply` would do it: an instance
    of `dst` with no identical process in `src` (same id, everything but `NOT_PROCESS`
    equal) is a (re)start; an identical one changes tier by a wake (to `gpu`) or a sleep
    (from `gpu`). `cost_s` sums cold starts, wakes and sleeps, `restart_s` the cold starts
    alone, `moved_gib` the memory the restarted instances load onto their GPUs (`perfs`:
    `dst`'s instance id -> perf)."""
    have = {i.id: i for i in src.instances}
    restarts = wakes = sleeps = 0
    cost_s = restart_s = moved_gib = 0.0
    for i in dst.instances:
        p = perfs.get(i.id)
        old = have.get(i.id)
        if old is None or not _same_process(old, i):
            restarts += 1
            restart_s += p.cold_start_s if p else 0.0
            moved_gib += i.memory_gib.total * max(len(i.gpus), 1)
        elif old.tier != "gpu" and i.tier == "gpu":
            wakes += 1
            cost_s += p.wake_s(old.tier) if p else 0.0
        elif old.tier == "gpu" and i.tier != "gpu":
            sleeps += 1
            cost_s += p.sleep_s if p else 0.0
    return Hop(
        restarts=restarts,
        wakes=wakes,
        sleeps=sleeps,
        cost_s=round(cost_s + restart_s, 3),
        restart_s=round(restart_s, 3),
        moved_gib=round(moved_gib, 3),
    )


def hop_table(
    points: Iterable[Point], perfs: dict[str, dict[str, InstancePerf]]
) -> dict[str, dict[str, Hop]]:
    """{FROM: {TO: Hop}} for every ordered pair of distinct points (`perfs` by point name)."""
    pts = list(points)
    return {a.name: {b.name: hop(a, b, perfs[b.name]) for b in pts if b is not a} for a in pts}
