"""Memory over the day (issue 30 item 3): what a point keeps on each GPU hour by hour.

A `gpu`-tier instance is awake all day. A `host`/`disk` instance is woken ahead of its
requests and kept awake in its `awake_hours`; outside them it sleeps (its CUDA context,
`memory_gib.asleep`, stays) once idle for the point's `idle_sleep_s`, or, without one, only
when a co-tenant's wake needs the memory; a request wakes it at any hour, within the GPU's
sleeping slot (the largest sleeper's awake memory). Pure: a point in, rows out.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.schemas.plan import Instance, Point

HOURS = range(24)


@dataclass(frozen=True)
class GpuDay:
    """One GPU of a point over the day."""

    node: str
    gpu: int
    by_hour_gib: tuple[float, ...]  # memory planned awake (and sleepers' contexts), each hour
    awake_by_hour: tuple[tuple[str, ...], ...]  # instances planned awake, each hour
    on_demand_gib: float  # at most this much more when a request wakes a sleeper off-hours

    @property
    def peak_gib(self) -> float:
        return max(self.by_hour_gib)

    @property
    def peak_hours(self) -> list[int]:
        """The hours at the peak (to 0.01 GiB)."""
        return [h for h in HOURS if self.by_hour_gib[h] >= self.peak_gib - 0.01]


def _awake_at(inst: Instance, hour: int) -> bool:
    return inst.tier == "gpu" or hour in inst.awake_hours


def day_memory(point: Point) -> list[GpuDay]:
    """Per GPU the point uses (sorted by node, device): its memory each hour of the day."""
    on: dict[tuple[str, int], list[Instance]] = {}
    for inst in point.instances:
        for g in inst.gpus:
            on.setdefault((inst.node, g), []).append(inst)
    out = []
    for (node, g), insts in sorted(on.items()):
        gib, awake = [], []
        for h in HOURS:
            up = [i for i in insts if _awake_at(i, h)]
            asleep = sum(i.memory_gib.asleep for i in insts if not _awake_at(i, h))
            gib.append(round(sum(i.memory_gib.total for i in up) + asleep, 3))
            awake.append(tuple(i.id for i in up))
        sleepers = [i.memory_gib.total - i.memory_gib.asleep for i in insts if i.tier != "gpu"]
        out.append(GpuDay(node, g, tuple(gib), tuple(awake), round(max(sleepers, default=0.0), 3)))
    return out


def idle_sleep_rule(point: Point) -> str:
    """The point's rule for sleepers outside their awake hours, in words."""
    if not any(i.tier != "gpu" for i in point.instances):
        return "every instance is always awake (tier gpu)"
    if point.idle_sleep_s is None:
        return (
            "outside their awake hours, host/disk instances sleep only when a co-tenant's "
            "wake needs the memory; a request wakes them at any hour"
        )
    return (
        f"outside their awake hours, host/disk instances sleep {point.idle_sleep_s:g} s after "
        "their last request; a request wakes them at any hour"
    )


def hours_text(hours: list[int]) -> str:
    """[5, 6, 7, 9] -> '05-08, 09-10' (UTC hour ranges, end exclusive)."""
    if not hours:
        return "-"
    spans, start = [], hours[0]
    for a, b in zip(hours, [*hours[1:], None], strict=True):
        if b != a + 1:
            spans.append(f"{start:02d}-{(a + 1) % 24:02d}")
            start = b
    return ", ".join(spans)


__all__ = ["GpuDay", "day_memory", "hours_text", "idle_sleep_rule"]
