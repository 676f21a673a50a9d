"""Why each model of a plan point sits where the plan file puts it.

Pure: the point's instances as the file holds them, the cluster, models, SLO and each
model's demand in; one explanation per model out. Nothing is re-solved, so what is
explained is the placement the file contains (a hand-edited file included): for each
instance, its capacity against the model's peak demand, how full its GPUs are and with
whom it shares them, what its tier costs or saves, the quality its variant gives up; and,
as the alternative, what the other variants and tiers would need on the same GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.optimizer.candidates import capacity_rps
from planner.optimizer.capacity import ranges
from planner.optimizer.demand import IDLE_GAP_S, ModelDemand
from planner.optimizer.invariants import gpu_usage
from planner.optimizer.perf import InstancePerf, instance_perf
from planner.optimizer.sim.perfs import gpu_group, perf_for_instance
from planner.schemas.cluster import Cluster
from planner.schemas.models import Models
from planner.schemas.plan import Instance, Point
from planner.schemas.slo import Slo

_TIGHT_GIB = 1.0  # a GPU with less free than this binds, GiB


@dataclass
class ModelExplanation:
    """The story of one model in one point."""

    model: str
    placements: list[str]
    reasons: list[str] = field(default_factory=list)
    alternative: str = ""
    stand_ins: list[str] = field(default_factory=list)  # who answers for it, for whom it does


def demand_from_summary(summary: dict[str, Any]) -> dict[str, ModelDemand]:
    """Per-model demand from a plan's `workload_summary` (what the plan was optimized for)."""
    out: dict[str, ModelDemand] = {}
    idle = summary.get("idle_arrivals_per_hour") or {}
    grid = list(idle.get("idle_s") or [])
    k = grid.index(IDLE_GAP_S) if IDLE_GAP_S in grid else None
    total = int(summary.get("requests") or 0)
    for m in summary.get("models") or []:
        lengths = (summary.get("lengths") or {}).get(m, {})
        share = float((summary.get("mix") or {}).get(m, 0.0))
        rates = idle.get(m) or []
        out[m] = ModelDemand(
            requests=round(share * total),
            peak_rps=float(((summary.get("peak") or {}).get(m) or {}).get("requests_per_s", 0.0)),
            mean_input_tokens=float(lengths.get("input_mean", 1024.0)),
            mean_output_tokens=float(lengths.get("output_mean", 256.0)),
            mean_cached_tokens=float(lengths.get("cached_mean", 0.0)),
            switch_ins=0,
            switch_ins_per_hour=float(rates[k]) if k is not None and k < len(rates) else 0.0,
            share=share,
        )
    return out


def _describe(inst: Instance, gpu_type: str, perf: InstancePerf, cap: float, quant: str) -> str:
    return (
        f"{inst.variant} ({quant}) on {inst.node} GPUs {inst.gpus} [{gpu_type}] tp={inst.tp} "
        f"tier={inst.tier}, {perf.awake_gib_per_gpu:.1f} GiB/GPU awake, {cap:.2f} req/s"
    )


def _room(point: Point, inst: Instance, cluster: Cluster, models: Models) -> float:
    """GiB per GPU left for `inst` beside its co-tenants (the least over its GPUs)."""
    rest = point.model_copy(update={"instances": [i for i in point.instances if i.id != inst.id]})
    usage, _ = gpu_usage(rest, cluster, models)
    return min(
        usage[(inst.node, g)].memory_gib - usage[(inst.node, g)].need()[0] for g in inst.gpus
    )


def _alternative(
    point: Point, inst: Instance, perf: InstancePerf, cluster: Cluster, models: Models
) -> str:
    """What the other variants (same GPUs, TP and KV budget) and tiers would need."""
    entry = models.model(inst.model)
    gpu = gpu_group(cluster, inst.node, inst.gpus[0])
    room = _room(point, inst, cluster, models)
    mine = entry.variant(inst.variant)
    out = []
    for v in sorted(entry.variants, key=lambda v: (v.quality_penalty, v.name)):
        if v.name == inst.variant:
            continue
        other = instance_perf(
            entry.arch,
            v.quantization,
            gpu.spec,
            inst.tp,
            kv_gib=inst.memory_gib.kv,
            max_model_len=inst.engine.max_model_len,
            max_num_seqs=inst.engine.max_num_seqs,
            interconnect=gpu.interconnect,
        )
        need = other.awake_gib_per_gpu
        penalty = f"quality penalty {v.quality_penalty:.2f} vs {mine.quality_penalty:.2f}"
        if need <= room:
            out.append(f"{v.name} would also fit ({need:.1f} GiB/GPU, {penalty})")
        else:
            out.append(
                f"{v.name} would need {need:.1f} GiB/GPU, {need - room:.1f} GiB more than is "
                f"free beside the co-tenants ({penalty})"
            )
    if inst.tier == "gpu":
        out.append(
            f"a sleeping tier would free {perf.awake_gib_per_gpu - perf.context_gib_per_gpu:.1f} "
            f"GiB/GPU when idle, for a wake of {perf.wake_host_s:.1f} s (host) or "
            f"{perf.wake_disk_s:.1f} s (disk) on each switch to it"
        )
    else:
        out.append(
            f"keeping it awake (tier gpu) would hold {perf.awake_gib_per_gpu:.1f} GiB/GPU at "
            "all times beside the always-awake instances"
        )
    if len(entry.variants) == 1:
        out.insert(0, "no other variant in the models file")
    return "; ".join(out)


def explain(
    point: Point,
    cluster: Cluster,
    models: Models,
    slo: Slo | None,
    demand: dict[str, ModelDemand],
    *,
    headroom: float = 1.0,
) -> list[ModelExplanation]:
    """One explanation per model of the models file, for the point's own instances."""
    usage, _ = gpu_usage(point, cluster, models)
    out: list[ModelExplanation] = []
    for m in models.names:
        mine = [i for i in point.instances if i.model == m]
        d = demand.get(m)
        tpot = slo.for_model(m).tpot_p95_s if slo is not None else None
        ex = ModelExplanation(m, [])
        have = 0.0
        for inst in mine:
            tag = f"{inst.id}: " if len(mine) > 1 else ""  # replicas: say whose reason it is
            perf = perf_for_instance(inst, cluster, models)
            cap = capacity_rps(perf, d, tpot)
            have += cap
            quant = models.model(m).variant(inst.variant).quantization
            gpu_type = usage[(inst.node, inst.gpus[0])].name
            ex.placements.append(_describe(inst, gpu_type, perf, cap, quant))
            for g in inst.gpus:
                u = usage[(inst.node, g)]
                left = u.memory_gib - u.need()[0]
                others = [i for i in u.ids if i != inst.id]
                shared = f", shared with {', '.join(others)}" if others else ""
                binds = ": memory binds" if left < _TIGHT_GIB else ""
                ex.reasons.append(
                    f"{tag}GPU {inst.node}:{g} ({u.name}, {u.memory_gib:g} GiB) has {left:.1f} "
                    f"GiB left{shared}{binds}"
                )
            ex.reasons.append(tag + _tier_reason(inst, perf, d))
            penalty = models.model(m).variant(inst.variant).quality_penalty
            if penalty > 0:
                ex.reasons.append(
                    f"variant {inst.variant}: quality penalty {penalty:.2f} accepted for its "
                    "smaller footprint"
                )
            ex.alternative = ex.alternative or _alternative(point, inst, perf, cluster, models)
        if not mine:
            ex.reasons.append("not served by this point: its requests fail")
        elif d is None or d.peak_rps <= 0:
            ex.reasons.append(f"capacity {have:.2f} req/s; no demand recorded for it")
        else:
            need = headroom * d.peak_rps
            verdict = "binds" if have < 1.05 * need else "covers it with room to spare"
            ex.reasons.insert(
                0,
                f"capacity {have:.2f} req/s for a peak of {d.peak_rps:.3f} req/s "
                f"(x{headroom:.2f} headroom: {need:.3f}): {verdict}",
            )
        ex.reasons = list(dict.fromkeys(ex.reasons))  # the variant's reason once
        ex.stand_ins = stand_in_reasons(point, m)
        out.append(ex)
    return out


def stand_in_reasons(point: Point, model: str) -> list[str]:
    """Which stand-ins `model` relies on in `point` (the point's `substitutes`) and how
    available each is there, and for which models it stands in itself."""
    out = []
    rule = point.substitutes.get(model)
    if rule is not None:
        when = (
            "whenever it must wake"
            if rule.when == "always_while_waking"
            else f"when its wake would exceed {rule.max_wait_s:g} s (its switch SLO)"
            if rule.max_wait_s is not None
            else "never (no switch SLO to exceed)"
        )
        mine = [i for i in point.instances if i.model == model]
        if mine and all(i.tier != "gpu" and not i.awake_hours for i in mine):
            out.append(
                "kept awake in no hour of the day: it relies on its stand-ins, and wakes only "
                "on demand"
            )
        for sub in rule.to:
            subs = [
                i
                for i in point.instances
                if i.model == sub.model and (sub.variant is None or i.variant == sub.variant)
            ]
            name = sub.model + (f" ({sub.variant})" if sub.variant else "")
            if not subs:
                ready = "has no instance in this point: it cannot stand in"
            elif any(i.tier == "gpu" for i in subs):
                ready = "always awake here"
            else:
                hours = sorted({h for i in subs for h in i.awake_hours})
                ready = (
                    f"awake here in hours {ranges(hours)} or while called"
                    if hours
                    else "asleep here until called: it stands in only while awake"
                )
            out.append(
                f"relies on stand-in {name} {when} (quality penalty {sub.quality_penalty:.2f}); "
                f"{ready}; the model itself {'still wakes' if rule.wake else 'does not wake'}"
            )
    for other, r in point.substitutes.items():
        for sub in r.to:
            if sub.model == model:
                only = f" (its {sub.variant} instances)" if sub.variant else ""
                out.append(
                    f"stands in for {other}{only} while {other} wakes "
                    f"(quality penalty {sub.quality_penalty:.2f})"
                )
    return out


def _tier_reason(inst: Instance, perf: InstancePerf, d: ModelDemand | None) -> str:
    rate = d.switch_ins_per_hour if d else 0.0
    share = 100 * d.share if d else 0.0
    if inst.tier == "gpu":
        return (
            f"always awake ({share:.1f}% of requests): sleeping to host would cost a "
            f"{perf.wake_host_s:.1f} s wake about {rate:.1f} times an hour"
        )
    wake_s = perf.wake_s(inst.tier)
    return (
        f"sleeps to {inst.tier} when idle ({share:.1f}% of requests): frees "
        f"{perf.awake_gib_per_gpu - perf.context_gib_per_gpu:.1f} GiB/GPU for a {wake_s:.1f} s "
        f"wake about {rate:.1f} times an hour (~{rate * wake_s:.0f} s/h of switch delay)"
    )
