"""Tier events of a simulation (wakes and sleeps) and the warm-memory timeline they imply.

The request flow needs no event objects (engines advance analytically between arrivals);
what has to be remembered is when each instance held its awake memory on its GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class TierEvent:
    """An instance starts waking (`wake`, memory held from `t_s`) or finishes sleeping
    (`sleep`, awake memory released at `t_s`)."""

    t_s: float
    kind: str  # "wake" | "sleep"
    instance: int


@dataclass
class Timeline:
    """Awake intervals per instance, from which warm GPU memory is integrated."""

    start_s: float
    events: list[TierEvent] = field(default_factory=list)
    open_since: dict[int, float] = field(default_factory=dict)  # instance -> awake since
    intervals: dict[int, list[tuple[float, float]]] = field(default_factory=dict)

    def awake_from(self, inst: int, t_s: float, *, counted: bool = True) -> None:
        """`inst` holds its awake memory from `t_s` (counted: a real wake, not the start)."""
        self.open_since[inst] = t_s
        if counted:
            self.events.append(TierEvent(t_s, "wake", inst))

    def asleep_from(self, inst: int, t_s: float, *, counted: bool = True) -> None:
        """`inst` released its awake memory at `t_s`."""
        since = self.open_since.pop(inst)
        self.intervals.setdefault(inst, []).append((since, max(t_s, since)))
        if counted:
            self.events.append(TierEvent(t_s, "sleep", inst))

    def close(self, end_s: float) -> None:
        """End of the simulation: close every open interval at `end_s`."""
        for inst in sorted(self.open_since):
            self.asleep_from(inst, max(end_s, self.open_since[inst]), counted=False)

    def count(self, kind: str) -> int:
        """Number of wakes or sleeps."""
        return sum(1 for e in self.events if e.kind == kind)

    def awake_s(self, inst: int, end_s: float) -> float:
        """Seconds `inst` held its awake memory within [start, end]."""
        return sum(
            min(b, end_s) - max(a, self.start_s) for a, b in self.intervals.get(inst, []) if b > a
        )

    def curve(
        self, awake_gib: dict[int, float], asleep_gib: dict[int, float], end_s: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Warm GPU memory as a step function: (times, GiB from each time to the next)."""
        base = sum(asleep_gib.values())  # every process holds at least its context
        delta: dict[float, float] = {self.start_s: 0.0}
        for inst, ivs in self.intervals.items():
            extra = awake_gib[inst] - asleep_gib.get(inst, 0.0)
            for a, b in ivs:
                delta[a] = delta.get(a, 0.0) + extra
                delta[b] = delta.get(b, 0.0) - extra
        ts = np.array(sorted(delta))
        gib = base + np.cumsum([delta[t] for t in ts])
        keep = ts < end_s
        if not keep.any():
            return ts[:1], gib[:1]
        # The level holds until the end (intervals closed at end_s drop only after it).
        return np.append(ts[keep], end_s), np.append(gib[keep], gib[keep][-1])
