"""Where a plan's engine servers listen on each node: the plan's ports, moved.

A plan numbers each node's ports from 8100 (`optimize`) or as written by hand. `apply` moves
them to a node's `ports:` range of the cluster file, or to `--port-base` (which wins, and is
recorded in the state dir so that the gateway and `adjust` use the same ports): each port
keeps its distance from the lowest port the plan gives that node in any point, so that an
instance keeps its port across points. Two plans on one host take two bases. Pure.
"""

from __future__ import annotations

from planner.errors import InputError
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Plan


def place_ports(plan: Plan, cluster: Cluster, port_base: int | None, *, file: str = "") -> Plan:
    """`plan` with each node's ports moved to `port_base`, else to the node's `ports.first`
    (unchanged where neither is given). InputError when a port leaves the node's range."""
    low: dict[str, int] = {}
    for p in plan.points:
        for i in p.instances:
            low[i.node] = min(low.get(i.node, i.port), i.port)
    shift: dict[str, int] = {}
    for node, lo in low.items():
        try:
            rng = cluster.node(node).ports
        except KeyError:
            rng = None
        base = port_base if port_base is not None else rng.first if rng is not None else lo
        shift[node] = base - lo
        top = max(i.port for p in plan.points for i in p.instances if i.node == node) + shift[node]
        last = rng.last if rng is not None else 65535
        if top > last or base < 1024:
            raise InputError(
                f"the ports of node {node!r} would run from {base} to {top}; they must lie in "
                f"1024..{last}",
                file=file,
                path="--port-base" if port_base is not None else f"nodes.{node}.ports",
                fix=f"pick a base from 1024 to {last - (top - base)}",
            )
    if not any(shift.values()):
        return plan
    points = [
        p.model_copy(
            update={
                "instances": [
                    i.model_copy(update={"port": i.port + shift[i.node]}) for i in p.instances
                ]
            }
        )
        for p in plan.points
    ]
    return plan.model_copy(update={"points": points})
