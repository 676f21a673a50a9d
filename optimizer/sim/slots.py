"""A plan point's instances as the simulator's router slots, and the point's rules that span
models (stand-ins, hand-offs) in the trace's model indexes."""

from __future__ import annotations

from typing import Any

from planner.optimizer import serving_rule
from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.sim.request import Outcome
from planner.optimizer.sim.router import Slot
from planner.schemas.plan import Point
from planner.units import GIB


def point_slots(
    point: Point,
    perfs: dict[str, InstancePerf],
    midx: dict[str, int],
    engine_cls: type,
    out: Outcome,
) -> tuple[list[Slot], dict[int, list[int]]]:
    """The point's instances as slots (plan order), and model index -> its slots' indexes
    (-1: instances of a model absent from the trace). Engines write into `out`."""
    missing = [i.id for i in point.instances if i.id not in perfs]
    if missing:
        raise ValueError(f"no InstancePerf for instances {missing} (see perfs_for_point)")
    slots: list[Slot] = []
    by_model: dict[int, list[int]] = {}
    for k, ins in enumerate(point.instances):
        perf = perfs[ins.id]
        m = midx.get(ins.model, -1)
        wake_s = 0.0 if ins.tier == "gpu" else perf.wake_s(ins.tier)
        gpus = tuple((ins.node, g) for g in ins.gpus) or ((ins.node, -1 - k),)
        slots.append(
            Slot(
                index=k,
                id=ins.id,
                model=m,
                tier=ins.tier,
                gpus=gpus,
                awake_gib=perf.awake_gib_per_gpu,
                context_gib=perf.context_gib_per_gpu,
                wake_s=wake_s,
                sleep_s=perf.sleep_s,
                engine_delay_s=perf.busy_delay_s,  # an idle engine adds its wake (idle_wake_s)
                engine=engine_cls(perf, out.first_token_s, out.finish_s),
                offload_tokens=_offload_tokens(ins.kv_cpu_offload_gib, perf),
                h2d_s_per_token=_h2d_s_per_token(perf),
                hours=frozenset(ins.awake_hours),
                variant=ins.variant,
            )
        )
        by_model.setdefault(m, []).append(k)
    return slots, by_model


def handoffs(point: Point, midx: dict[str, int]) -> dict[int, list[int]]:
    """model index -> the model indexes a request for it also wakes (`Point.handoff`, the
    models of the trace only; models with none left out)."""
    out = {
        midx[a]: [midx[b] for b in bs if b in midx] for a, bs in point.handoff.items() if a in midx
    }
    return {a: bs for a, bs in out.items() if bs}


def substitutes(
    point: Point, slots: list[Slot], by_model: dict[int, list[int]], midx: dict[str, int]
) -> dict[int, tuple[Any, list[tuple[Slot, float]]]]:
    """model index -> (its substitute rule, the stand-in slots and their quality penalty),
    for the models of the point's rules that are in the trace and have a stand-in."""
    out = {}
    for name, rule in point.substitutes.items():
        if name not in midx:
            continue

        def instances_of(model: str) -> list[Slot]:
            return [slots[i] for i in by_model.get(midx.get(model, -2), [])]

        cands = serving_rule.stand_ins(rule, instances_of, lambda s: s.variant)
        if cands:
            out[midx[name]] = (rule, cands)
    return out


def _offload_tokens(kv_cpu_offload_gib: float, perf: InstancePerf) -> float:
    """Prefix tokens the instance's CPU KV tier holds (0: none)."""
    if kv_cpu_offload_gib <= 0 or perf.kv_bytes_per_token <= 0:
        return 0.0
    return kv_cpu_offload_gib * GIB / perf.kv_bytes_per_token  # GiB -> bytes -> tokens


def _h2d_s_per_token(perf: InstancePerf) -> float:
    """Seconds to bring one token's KV back from host RAM, at the rate a level-1 wake
    moves weights (wake_host_s for weights_host_gib, fixed costs included)."""
    if perf.weights_host_gib <= 0 or perf.wake_host_s <= 0:
        return 0.0
    return perf.wake_host_s / (perf.weights_host_gib * GIB) * perf.kv_bytes_per_token  # s/token
