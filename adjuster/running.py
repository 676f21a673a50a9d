"""What runs now, as opposed to what the state rows say: live checks, and the rows made true.

`observed_instances` reads each row against its process and health route; `settle` writes
the real state of rows an interrupted apply or a crash left behind, journaled;
`blocked_ports` finds the point's ports that another program holds. `apply` runs all three
under its lease, `status` the first two when it can take the lease.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.adjuster.backends.base import Backend
from planner.adjuster.launch import handle_of
from planner.adjuster.reconcile import Observed
from planner.adjuster.state import NO_PROCESS, StateStore
from planner.engines.ports import PortHolder
from planner.errors import LaunchError
from planner.schemas.plan import Instance, Point

PortLookup = Callable[[str, int], PortHolder | None]  # (node, port) -> who listens there


def observed_instances(state: StateStore, backend: Backend) -> dict[str, Observed]:
    """What runs now: state rows checked against the live process and `/health`.

    A row left `starting` whose server is not up stays `starting` (an interrupted start, not
    a crash); an awake or asleep one that does not answer is `failed`.
    """
    out: dict[str, Observed] = {}
    for row in state.instances():
        status = row.status
        if status in ("awake", "asleep", "starting"):
            alive = row.has_process and backend.is_alive(handle_of(row))
            if alive and status == "starting":
                status = "awake"  # an earlier apply died after the server came up
            elif not alive and status != "starting":
                status = "failed"
        out[row.id] = Observed(
            status=status,  # type: ignore[arg-type]
            node=row.node,
            gpus=row.gpu_list,
            port=row.port,
            tier=row.tier,
            spec_sha=row.spec_sha,
            memory_gib=row.memory_gib,
        )
    return out


def settle(state: StateStore, backend: Backend, *, wait_s: float = 0.0) -> dict[str, Observed]:
    """Write the real state of every row where it differs from the recorded one, journaled;
    returns what runs now (as `observed_instances`).

    What an interrupted apply (or a crash) leaves behind: a start whose server comes up
    within `wait_s` is `awake` (journal `adopt`), one whose process is gone is `stopped`
    (journal `start interrupted`), one still under way stays `starting`; an awake or asleep
    instance that does not answer is `failed`, or `stopped` where a sleeping instance is a
    stopped process (lazy tier without sleep mode).
    """
    seen = observed_instances(state, backend)
    for r in state.instances():
        o = seen[r.id]
        h = handle_of(r)
        who = r.label
        if r.status == "starting" and r.has_process:
            try:
                backend.wait_ready(h, wait_s)
            except LaunchError as e:
                if e.reason == "timeout":
                    o.status = "starting"  # still coming up: whoever started it waits for it
                    continue
                o.status = "stopped"
                state.update(r.id, status="stopped", **NO_PROCESS)
                state.journal("start", r.id, r.node, "interrupted", f"{who} is gone")
                continue
            o.status = "awake"
            state.update(r.id, status="awake")
            state.journal("adopt", r.id, r.node, "ok", f"{who} came up after its start")
        elif r.status in ("awake", "asleep") and o.status == "failed":
            if r.tier in ("host", "disk") and not backend.supports_sleep:
                backend.stop(h, 10.0)
                o.status = "stopped"
                state.update(r.id, status="stopped", **NO_PROCESS)
            else:
                state.update(r.id, status="failed")
            state.journal("lost", r.id, r.node, o.status, f"{who} does not answer (was {r.status})")
    return seen


def blocked_ports(
    point: Point, state: StateStore, holder_of: PortLookup | None
) -> list[tuple[Instance, PortHolder]]:
    """The point's instances whose port another program holds: not free, and not a server
    of this state dir (its pid, or a process of its session). None lookup: none known."""
    if holder_of is None:
        return []
    # One of the documented `.pid` reads outside adjuster/backends/ (with the pre-v3 rows'
    # compatibility in state_file.py): the OS names a port's holder by pid, so it is compared
    # with the pids of this state dir's servers; a backend without processes records none.
    ours = {r.pid for r in state.instances() if r.pid is not None}
    out = []
    for inst in point.instances:
        h = holder_of(inst.node, inst.port)
        if h is not None and h.pid not in ours and h.sid not in ours:
            out.append((inst, h))
    return out
