"""The gateway's admission bound in the simulator (`planner.optimizer.admission`): every path
refuses a request that finds its model's awake instances and queue full. The router's path
counts with `Admission`; the fast paths (`alone`, `replicas`), whose instances never sleep,
count inside their loops against `never_sleeping_bound`."""

from __future__ import annotations

import numpy as np

from planner.optimizer import admission


def never_sleeping_bound(perfs: list) -> int:
    """The bound of a model whose instances (their `InstancePerf`s) are awake throughout."""
    return admission.model_bound([admission.instance_limit(p.max_num_seqs) for p in perfs])


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
