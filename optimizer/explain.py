"""Why each model got its variant, GPUs and tier: binding constraints and the next-best option."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.optimizer.milp import MilpInput, MilpResult, Placement, solve, switch_delay_s_per_h

_TIGHT_GIB = 1.0  # a GPU with less free than this binds, GiB
_TIGHT_REL = 0.05  # a capacity constraint within 5% of its bound binds


@dataclass
class ModelExplanation:
    """The story of one model in one point."""

    model: str
    placements: list[str]
    reasons: list[str] = field(default_factory=list)
    alternative: str = ""


def _describe(p: Placement) -> str:
    c = p.cand
    return (
        f"{c.variant} ({c.quantization}) on {p.gset.node} GPUs {list(p.gset.gpus)} "
        f"[{c.gpu_type}] tp={c.tp} tier={p.tier}, {c.perf.awake_gib_per_gpu:.1f} GiB/GPU awake, "
        f"{c.capacity_rps:.2f} req/s"
    )


def explain(
    inp: MilpInput, res: MilpResult, *, time_limit_s: float = 10.0
) -> list[ModelExplanation]:
    """One explanation per model, from the solved MILP `res` of `inp`."""
    out: list[ModelExplanation] = []
    gpu_keys = sorted(inp.gpu_usable_gib)
    for mi, m in enumerate(inp.models):
        mine = [p for p in res.placements if p.cand.model == m]
        ex = ModelExplanation(m, [_describe(p) for p in mine])
        d = inp.demand.get(m)
        cap_slack = res.slack.get(f"c2_capacity_{mi}")
        if d is not None and cap_slack is not None:
            need = inp.headroom * d.peak_rps
            have = sum(p.cand.capacity_rps for p in mine)
            if need > 0 and cap_slack <= _TIGHT_REL * need:
                ex.reasons.append(
                    f"capacity binds: {have:.2f} req/s for {need:.2f} needed "
                    f"(headroom {inp.headroom:.2f} x peak {d.peak_rps:.3f} req/s)"
                )
            else:
                ex.reasons.append(
                    f"capacity {have:.2f} req/s covers {need:.2f} needed with room to spare"
                )
        for p in mine:
            for g in p.gset.gpus:
                k = gpu_keys.index((p.gset.node, g))
                s = res.slack.get(f"c5_memory_{k}")
                if s is not None and s < _TIGHT_GIB:
                    ex.reasons.append(f"GPU {p.gset.node}:{g} memory binds ({s:.2f} GiB left)")
            if p.tier == "gpu" and m not in inp.may_sleep:
                share = d.share if d else 0.0
                ex.reasons.append(
                    f"always awake: not among the models allowed to sleep at this point "
                    f"({100 * share:.1f}% of requests)"
                )
            elif p.tier == "gpu":
                ex.reasons.append(
                    "always awake: sleeping would cost more switch delay than the memory it frees"
                )
            else:
                saved = (
                    p.cand.perf.awake_gib_per_gpu - p.cand.perf.context_gib_per_gpu
                ) * p.cand.tp
                ex.reasons.append(
                    f"sleeps to {p.tier}: frees up to {saved:.1f} GiB when idle for "
                    f"~{switch_delay_s_per_h(p, inp.demand):.1f} s/h of expected switch delay"
                )
            if p.cand.quality_penalty > 0:
                ex.reasons.append(
                    f"quantized variant {p.cand.variant}: quality penalty "
                    f"{p.cand.quality_penalty:.2f} accepted for its smaller footprint"
                )
        forbid = frozenset((p.cand.model, p.cand.variant, p.cand.gpu_type, p.tier) for p in mine)
        alt = solve(inp, time_limit_s=time_limit_s, forbid=forbid)
        if alt.status == "infeasible":
            ex.alternative = "no other option fits: the chosen option is the only feasible one"
        else:
            alt_mine = [p for p in alt.placements if p.cand.model == m]
            delta = alt.objective - res.objective
            ex.alternative = (
                f"next best: {'; '.join(_describe(p) for p in alt_mine)} "
                f"(objective +{delta:.3f}, {100 * delta / max(abs(res.objective), 1e-9):.1f}% worse)"
            )
        ex.reasons = list(dict.fromkeys(ex.reasons))  # replicas give the same reasons once
        out.append(ex)
    return out
