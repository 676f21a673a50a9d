"""Discrete-event simulator of a plan point serving a trace (Vidur style: one module a noun).

`simulate(point, perfs, trace, slo)` -> `SimResult`; `perfs_for_point` builds the perfs;
`to_requests` converts a trace once for many simulations.
"""

from planner.optimizer.sim.metrics import SimResult
from planner.optimizer.sim.perfs import perfs_for_point
from planner.optimizer.sim.request import Requests, to_requests
from planner.optimizer.sim.simulator import simulate

__all__ = ["Requests", "SimResult", "perfs_for_point", "simulate", "to_requests"]
