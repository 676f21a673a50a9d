"""Desired plan point vs observed instances -> an ordered list of actions (pure).

Order, make-before-break:
1. stops that free GPUs (or a port) a start needs: a start whose GPUs overlap an instance
   leaving them waits for it, unless the GPU capacity is known and both fit at once;
2. restarts (dead instances, changed specs) and starts of `tier: gpu` instances;
3. `host`/`disk` instances, one at a time per GPU: start, then sleep, before the next starts;
   an awake co-tenant on those GPUs is put to sleep first (only where the backend has sleep
   mode; without it a sleeping instance is a stopped one, so nothing is started for it);
4. the remaining stops, once their replacements run.

`actual` comes from the state store plus live health checks; `spec_sha` is the hash of the
plan's Instance the process was started from (`spec_sha(inst)`, tier left out), so any
change of flags, GPUs or port restarts it. A change of tier alone is a sleep or a wake
(every CUDA instance runs with sleep mode): an awake instance that becomes host/disk tier
is put to sleep before the starts (its memory goes to them), an asleep one that becomes
gpu tier is woken. Without sleep mode an awake instance that becomes lazy keeps running
(the gateway stops it when a co-tenant needs its GPU).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal

from planner.engines.base import get_engine
from planner.schemas.plan import Instance, Point

ActionKind = Literal["start", "stop", "sleep", "wake", "restart"]
PROCESS_DIED = "process died"  # the reason of a restart that counts as a crash
ObservedStatus = Literal["awake", "asleep", "stopped", "starting", "failed"]


@dataclass(frozen=True)
class Action:
    """One step of an apply."""

    kind: ActionKind
    instance: str
    node: str
    reason: str
    level: int = 0  # sleep level (1: weights to host RAM, 2: discard) for `sleep`


@dataclass
class Observed:
    """What runs now for one instance id."""

    # `failed`: should run but its process is gone or unhealthy; `starting`: its start never
    # finished (the apply that started it was killed) and it is not up now
    status: ObservedStatus
    node: str
    gpus: list[int] = field(default_factory=list)
    port: int = 0
    tier: str = "gpu"
    spec_sha: str = ""
    memory_gib: float = 0.0  # per GPU when awake, from the spec it was started with


# Instance fields that are not process flags: the tier (the same process serves every tier)
# and what the plan file notes for its readers (GPU type, co-tenants).
_NOT_FLAGS = {"tier", "gpu_type", "shares_gpu_with"}


def spec_sha(inst: Instance) -> str:
    """Content hash of an Instance (what a running process was started from), without the
    fields that start no other process (`_NOT_FLAGS`): a point that only changes them is a
    sleep or a wake, and state rows of earlier versions keep their hash. Awake hours are the
    gateway's schedule, not a flag (the ladder's rungs differ in them: issue 41); hashed as
    none, so an instance without any keeps its hash."""
    flags = inst.model_copy(update={"awake_hours": []})
    blob = json.dumps(
        flags.model_dump(mode="json", exclude=_NOT_FLAGS), sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def sleep_level(inst: Instance) -> int:
    """The sleep level of the instance's tier in its engine (vLLM: host 1, disk 2)."""
    return get_engine(inst.engine.kind).sleep_level(inst.tier)


def diff(
    desired: Point,
    actual: dict[str, Observed],
    *,
    sleep_supported: bool = True,
    gpu_capacity_gib: dict[tuple[str, int], float] | None = None,
) -> list[Action]:
    """The actions that turn `actual` into `desired`, ordered make-before-break."""
    want = {i.id: i for i in desired.instances}
    starts: list[Action] = []
    tiered: dict[tuple[str, tuple[int, ...]], list[Action]] = {}

    # instances that go away, and what they hold
    leaving = {k: o for k, o in actual.items() if k not in want and o.status != "stopped"}

    def conflicts(inst: Instance) -> list[str]:
        out = []
        for k, o in leaving.items():
            if o.node != inst.node:
                continue
            if o.port == inst.port or (
                set(o.gpus) & set(inst.gpus) and not _fits(inst, actual, pending, gpu_capacity_gib)
            ):
                out.append(k)
        for g in inst.gpus:  # later starts see this one's memory as taken
            pending[(inst.node, g)] = pending.get((inst.node, g), 0.0) + inst.memory_gib.total
        return out

    pending: dict[tuple[str, int], float] = {}  # GiB of starts planned so far, per GPU
    must_go_first: set[str] = set()
    tier_sleeps: list[Action] = []  # awake instances the point moves to a lazy tier
    wakes: list[Action] = []  # asleep instances the point moves to the gpu tier
    for inst in desired.instances:
        act = _instance_action(inst, actual.get(inst.id), sleep_supported)
        if act is None:
            continue
        if act.kind == "wake":
            wakes.append(act)
            continue
        if act.kind == "sleep":
            tier_sleeps.append(act)
            continue
        must_go_first.update(conflicts(inst))
        if inst.tier in ("host", "disk") and sleep_supported:
            key = (inst.node, tuple(sorted(inst.gpus)))
            tiered.setdefault(key, []).extend(
                [
                    act,
                    Action("sleep", inst.id, inst.node, f"{inst.tier} tier", sleep_level(inst)),
                ]
            )
        else:
            starts.append(act)

    first_stops, late_stops = _stops(leaving, must_go_first)
    out = first_stops + tier_sleeps + wakes + starts
    put_to_sleep: set[str] = {a.instance for a in tier_sleeps}
    for key in sorted(tiered):
        out += _cotenant_sleeps(key, tiered[key], actual, want, put_to_sleep)
        out += tiered[key]
    return out + late_stops


def _instance_action(inst: Instance, obs: Observed | None, sleep_supported: bool) -> Action | None:
    """What one instance of the point needs: a wake (now gpu tier), a sleep (now a lazy
    tier), a start or a restart, or nothing (None)."""
    lazy = inst.tier in ("host", "disk")
    # the running process was started from this spec (tier aside); unknown hash: assume so
    same = obs is not None and (not obs.spec_sha or obs.spec_sha == spec_sha(inst))
    if obs is None or obs.status == "stopped":
        if lazy and not sleep_supported:
            return None  # asleep == stopped without sleep mode
        return Action("start", inst.id, inst.node, "not running")
    if not same:
        return Action("restart", inst.id, inst.node, "spec changed")
    if obs.status == "asleep" and not lazy:
        return Action("wake", inst.id, inst.node, "now gpu tier: always awake")
    if obs.status == "awake" and lazy and obs.tier == "gpu" and sleep_supported:
        return Action("sleep", inst.id, inst.node, f"now {inst.tier} tier", sleep_level(inst))
    if obs.status in ("failed", "starting"):
        if lazy and not sleep_supported:
            return None
        why = PROCESS_DIED if obs.status == "failed" else "its start was interrupted"
        return Action("restart", inst.id, inst.node, why)
    return None  # awake, or asleep/awake for a lazy tier: the gateway decides which


def _stops(
    leaving: dict[str, Observed], must_go_first: set[str]
) -> tuple[list[Action], list[Action]]:
    """The stops of the instances that leave: (those whose GPUs or port a start needs, the
    rest), each by instance id."""
    first: list[Action] = []
    late: list[Action] = []
    for k in sorted(leaving):
        o = leaving[k]
        reason = "not in the point"
        if k in must_go_first:
            first.append(Action("stop", k, o.node, reason + "; frees its GPUs/port first"))
        else:
            late.append(Action("stop", k, o.node, reason))
    return first, late


def _cotenant_sleeps(
    key: tuple[str, tuple[int, ...]],
    group: list[Action],
    actual: dict[str, Observed],
    want: dict[str, Instance],
    put_to_sleep: set[str],
) -> list[Action]:
    """An awake co-tenant (woken by the gateway) of the lazy instances starting on `key`'s
    GPUs sleeps before they start beside it; `put_to_sleep` collects who is sent to sleep."""
    node, gpus = key
    out = []
    for k in sorted(actual):
        o = actual[k]
        d = want.get(k)
        if (
            d is not None
            and d.tier in ("host", "disk")
            and o.status == "awake"
            and o.node == node
            and set(o.gpus) & set(gpus)
            and k not in put_to_sleep
            and not any(a.instance == k for a in group)
        ):
            put_to_sleep.add(k)
            out.append(Action("sleep", k, node, "co-tenant of a starting instance", sleep_level(d)))
    return out


def _fits(
    inst: Instance,
    actual: dict[str, Observed],
    pending: dict[tuple[str, int], float],
    cap: dict[tuple[str, int], float] | None,
) -> bool:
    """Whether `inst` fits on its GPUs beside everything running there now (unknown capacity: no)."""
    if cap is None:
        return False
    for g in inst.gpus:
        c = cap.get((inst.node, g))
        if c is None:
            return False
        used = sum(
            o.memory_gib
            for o in actual.values()
            if o.node == inst.node and g in o.gpus and o.status in ("awake", "starting")
        )
        if used + pending.get((inst.node, g), 0.0) + inst.memory_gib.total > c:
            return False
    return True
