"""Planned tiers by hour: which lazy instances a point keeps awake in which hours of the day.

What a plan knows that reactive swapping does not is when each model is asked for. The
forecast is the mean number of requests per hour of day of each model over the days the
plan fits to (`hourly_rates`). A schedule variant of a point (`scheduled`) makes every
instance lazy (host tier while its node's RAM holds the weights, else disk), then, hour by
hour, keeps awake the instances whose model's forecast reaches `min_requests_per_h`,
busiest first, while they fit their GPUs together (`gpu_usable_gib`). Requests the
forecast does not expect still come, mostly at the edges of the working day, and wait for
their model's wake. A plan is only worth its memory where those waits are short, so an
instance whose wake is slower than `fast_wake_s` (a share of a slow switch under reactive
swapping) is kept awake in every hour its forecast is above zero and the hour before them
(`edge_rates`: a few fitted days do not place the working day's start to the hour). The
gateway and the simulator wake instances at the start of their awake hours, before their
requests (`serving_rule.wakes_ahead`); outside them an instance sleeps `idle_sleep_s` after its last
request (`serving_rule.sleep_due_s`) and is woken by the next. Warm memory then follows the
working day instead of its peak, and the models that alternate in the same hours are awake
together instead of evicting each other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.serving_rule import DAY_H, HOUR_S
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Instance, Point

DAY_S = DAY_H * HOUR_S


def hourly_rates(trace: Any, days: int | None = None) -> dict[str, np.ndarray]:
    """model -> mean requests in each hour of the day (24 values) over `days` days, by default
    the calendar days the trace touches (a trace with held-back days taken out of its middle
    covers fewer: its caller says how many)."""
    t = np.asarray(trace["timestamp"], dtype=float)
    if not len(t):
        return {}
    if days is None:
        days = int(np.floor(t.max() / DAY_S) - np.floor(t.min() / DAY_S)) + 1
    hour = (np.floor(t / HOUR_S) % DAY_H).astype(np.int64)
    models = np.asarray(trace["model"])
    out = {}
    for m in dict.fromkeys(models.tolist()):
        out[str(m)] = np.bincount(hour[models == m], minlength=DAY_H) / days
    return out


def handoffs(trace: Any, min_share: float) -> dict[str, list[str]]:
    """model A -> the models B that come next in the same session after at least `min_share`
    of A's requests that have a next one (B != A; most frequent first, then by name). Agent
    sessions alternate models: after the planner the coder, after the coder the reviewer.
    Requests without a session (empty `session`) are not counted."""
    if not len(trace) or "session" not in trace:
        return {}
    df = trace[["timestamp", "model"]].assign(
        key=trace["user"].astype(str) + "\0" + trace["session"].astype(str),
        known=trace["session"].astype(str) != "",
    )
    df = df[df["known"]].sort_values(["key", "timestamp"], kind="stable")
    same = df["key"].to_numpy()[1:] == df["key"].to_numpy()[:-1]
    a = df["model"].to_numpy()[:-1][same].astype(str)
    b = df["model"].to_numpy()[1:][same].astype(str)
    pairs = pd.DataFrame({"a": a, "b": b}).value_counts()
    total = pairs.groupby(level="a").sum()
    out: dict[str, list[str]] = {}
    for (ma, mb), n in sorted(pairs.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1])):
        if ma != mb and n >= min_share * total[ma]:
            out.setdefault(ma, []).append(mb)
    return out


def gpu_usable_gib(point: Point, cluster: Cluster, margin: float) -> dict[str, dict[int, float]]:
    """node -> device -> GiB the point may fill (device memory less `margin`), for the GPUs
    its instances use."""
    mem = {(n.name, d): g.spec.memory_gib for n in cluster.nodes for d, g in n.gpu_list()}
    out: dict[str, dict[int, float]] = {}
    for i in point.instances:
        for d in i.gpus:
            if (i.node, d) in mem:
                out.setdefault(i.node, {})[d] = round(mem[(i.node, d)] * (1 - margin), 3)
    return out


def all_lazy(
    point: Point, perfs: dict[str, InstancePerf], cluster: Cluster, host_margin: float
) -> Point:
    """`point` with every gpu-tier instance lazy: host tier while its node's RAM (less
    `host_margin`) holds the weights of the host-tier ones, else disk."""
    ram = {n.name: n.cpu_memory_gib * (1 - host_margin) for n in cluster.nodes}
    for inst in point.instances:
        if inst.tier == "host":
            ram[inst.node] -= perfs[inst.id].weights_host_gib
    insts = []
    for inst in point.instances:
        tier = inst.tier
        if tier == "gpu":
            need = perfs[inst.id].weights_host_gib
            tier = "host" if ram[inst.node] >= need else "disk"
            if tier == "host":
                ram[inst.node] -= need
        insts.append(inst.model_copy(update={"tier": tier}))
    return point.model_copy(update={"instances": insts})


def _lazy_forecast(point: Point, rates: dict[str, np.ndarray]) -> list[Instance]:
    """The point's host/disk instances whose model has a forecast."""
    return [i for i in point.instances if i.tier != "gpu" and i.model in rates]


def fast_wake_s(
    point: Point, perfs: dict[str, InstancePerf], rates: dict[str, np.ndarray], factor: float
) -> float:
    """The slowest wake a lazy `point` may leave to requests its forecast does not expect:
    1/`factor` of a slow switch under reactive swapping among its requested models (sleep a
    typical co-tenant, the median sleep, then wake the slowest instance), s."""
    lazy = _lazy_forecast(point, rates)
    if not lazy:
        return np.inf
    sleep_s = float(np.median([perfs[i.id].sleep_s for i in lazy]))
    return (max(perfs[i.id].wake_s(i.tier) for i in lazy) + sleep_s) / factor


def edge_rates(rate: np.ndarray) -> np.ndarray:
    """Each hour's forecast, or the next hour's where that is higher (the day wraps around):
    the hour before each run of hours with requests counts as one. A few fitted days do not
    place the start of the working day to the hour (with a weekend day among them, the
    working days are fewer still): an hour none of them had a request in, just before one
    they had, still gets some on other days, and a slow wake left to those is the switch a
    plan is meant to spare them. Its end needs no such hour: an instance stays awake
    `idle_sleep_s` after its last request."""
    return np.maximum(rate, np.roll(rate, -1))


def awake_hours(
    point: Point,
    perfs: dict[str, InstancePerf],
    rates: dict[str, np.ndarray],
    min_requests_per_h: float,
    fast_s: float = np.inf,
) -> dict[str, list[int]]:
    """instance id -> the hours it is kept awake (see the module docstring); those waking
    slower than `fast_s` (`fast_wake_s`) keep every hour their forecast is above zero, and
    the hour before each run of those (`edge_rates`). GPUs the point gives no capacity for
    hold one lazy instance awake at a time."""
    cap = {(n, d): gib for n, devs in point.gpu_usable_gib.items() for d, gib in devs.items()}
    base: dict[tuple[str, int], float] = {}  # GiB held whatever the hour
    for i in point.instances:
        p = perfs[i.id]
        for d in i.gpus:
            held = p.awake_gib_per_gpu if i.tier == "gpu" else p.context_gib_per_gpu
            base[(i.node, d)] = base.get((i.node, d), 0.0) + held
    lazy = _lazy_forecast(point, rates)
    slow = {i.id for i in lazy if perfs[i.id].wake_s(i.tier) > fast_s}
    near = {i.model: edge_rates(rates[i.model]) for i in lazy if i.id in slow}
    out: dict[str, list[int]] = {i.id: [] for i in lazy}
    for h in range(DAY_H):
        used = dict(base)
        lazy_awake: set[tuple[str, int]] = set()
        for i in sorted(lazy, key=lambda i: -rates[i.model][h]):
            # slow wakes whenever any request is forecast in the hour or the next
            quiet = (
                near[i.model][h] <= 0 if i.id in slow else rates[i.model][h] < min_requests_per_h
            )
            if quiet:
                continue
            p = perfs[i.id]
            gpus = [(i.node, d) for d in i.gpus]
            extra = p.awake_gib_per_gpu - p.context_gib_per_gpu  # GiB its wake adds per GPU
            if any(
                (g not in cap and g in lazy_awake) or used[g] + extra > cap.get(g, np.inf) + 1e-9
                for g in gpus
            ):
                continue
            for g in gpus:
                used[g] += extra
                lazy_awake.add(g)
            out[i.id].append(h)
    return out


def scheduled(
    point: Point,
    perfs: dict[str, InstancePerf],
    rates: dict[str, np.ndarray],
    cluster: Cluster,
    *,
    min_requests_per_h: float,
    switch_factor: float,
    idle_sleep_s: float,
    host_margin: float,
    no_hours_for: frozenset[str] = frozenset(),
    handoff: dict[str, list[str]] | None = None,
) -> Point:
    """The schedule variant of `point` (module docstring); its `gpu_usable_gib` must be set.
    `rates` is the forecast (`hourly_rates`); instances waking slower than 1/`switch_factor`
    of a slow switch under reactive swapping (`fast_wake_s`) keep every hour it is above
    zero.
    The models in `no_hours_for` (those a stand-in covers) keep no awake hours: they wake
    on demand only. `handoff` (`handoffs` of the fitted days) becomes the point's: a
    request also wakes the models that often follow it where that puts nobody to sleep
    (`serving_rule.wakes_on_handoff`)."""
    lazy = all_lazy(point, perfs, cluster, host_margin)
    rates = {m: r for m, r in rates.items() if m not in no_hours_for}
    fast_s = fast_wake_s(lazy, perfs, rates, switch_factor)
    hours = awake_hours(lazy, perfs, rates, min_requests_per_h, fast_s)
    insts = [i.model_copy(update={"awake_hours": hours.get(i.id, [])}) for i in lazy.instances]
    models = {i.model for i in insts}
    hand = {a: [b for b in bs if b in models] for a, bs in (handoff or {}).items() if a in models}
    return lazy.model_copy(
        update={
            "instances": insts,
            "idle_sleep_s": idle_sleep_s,
            "handoff": {a: bs for a, bs in hand.items() if bs},
        }
    )


__all__ = [
    "all_lazy",
    "awake_hours",
    "edge_rates",
    "fast_wake_s",
    "gpu_usable_gib",
    "handoffs",
    "hourly_rates",
    "scheduled",
]
