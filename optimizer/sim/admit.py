"""The gateway's admission bound in the simulator (`planner.optimizer.admission`): the
router's path refuses a request that finds its model's awake instances and queue full; the
fast paths (an instance alone with its model) are checked after the run and, where the bound
was reached, served again through the router."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from planner.optimizer import admission
from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.sim.metrics import SimResult
from planner.schemas.plan import Point


class Admission:
    """The gateway's admission bound on the router's path (`planner.optimizer.admission`):
    a request that finds its model's awake instances and queue full is refused."""

    def __init__(self, slots, cands, perfs, refused: np.ndarray) -> None:
        """`cands`: each model's slots (`Router.cands`)."""
        self.refused, self.cands = refused, cands
        self.limit = [admission.instance_limit(perfs[s.id].max_num_seqs) for s in slots]
        # Requests each slot holds at most: its count when last taken, plus one for each
        # request sent to it since (they only leave as time passes). Below the bound a
        # model needs no count: the common case, which spares advancing every engine at
        # every arrival.
        self.held_at_most = [0] * len(slots)

    def sent(self, slot: int) -> None:
        """A request was submitted to slot `slot`'s engine."""
        self.held_at_most[slot] += 1

    def full(self, model: int, t: float) -> bool:
        """Whether a request of `model` arriving at `t` is refused."""
        cands = self.cands.get(model)
        if not cands:
            return False
        most, limit = self.held_at_most, self.limit
        bound = admission.model_bound([limit[c.index] for c in cands if c.awake and c.ready_s <= t])
        if sum([most[c.index] for c in cands]) < bound:
            return False
        held = 0
        for c in cands:
            most[c.index] = n = c.engine.outstanding(t)
            held += n
        return held >= bound


def over_bound(point: Point, perfs: dict[str, InstancePerf], res: SimResult) -> frozenset[int]:
    """Models (indexes) whose requests in flight reached the admission bound of all their
    instances awake (`admission.model_bound`): only the router's path can refuse them."""
    limits: dict[str, list[int]] = {}
    for ins in point.instances:
        limits.setdefault(ins.model, []).append(
            admission.instance_limit(perfs[ins.id].max_num_seqs)
        )
    out = set()
    finish = res.arrival_s + res.e2e_s
    for m, name in enumerate(res.model_names):
        sel = (res.model == m) & np.isfinite(finish)
        if name not in limits or not sel.any():
            continue
        if admission.in_system(res.arrival_s[sel], finish[sel]).max() >= admission.model_bound(
            limits[name]
        ):
            out.add(m)
    return frozenset(out)


def with_admission(
    serve: Callable[[frozenset[int]], SimResult], point: Point, perfs: dict[str, InstancePerf]
) -> SimResult:
    """`serve` (a run with the models given taking the router's path), once with the fast
    paths; where a model's requests in flight reached its bound (the gateway would have
    refused some), again with those models through the router, which admits request by
    request."""
    res = serve(frozenset())
    full = over_bound(point, perfs, res)
    return serve(full) if full else res
