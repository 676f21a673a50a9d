"""Demand against capacity, hour by hour: which models at which hours are beyond what the
cluster (or a point) can serve, so an overloaded trace is said plainly.

A model's capacity is the requests/s its instances sustain at its TPOT target for its mean
lengths (`candidates.capacity_rps`): for the cluster, with every GPU it fits on given to it
(per GPU group, the best variant and TP times the TP groups the group holds); for a point,
its own instances. An hour is beyond capacity for a model when its requests that hour
exceed capacity x 3600; for the cluster as a whole when the models' shares of the whole
cluster (demand / capacity) add up past 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.optimizer.candidates import Candidate, capacity_rps
from planner.optimizer.demand import ModelDemand
from planner.optimizer.perf.types import InstancePerf
from planner.schemas.cluster import Cluster
from planner.schemas.plan import ModelCapacity, Point
from planner.schemas.slo import Slo

HOUR_S = 3600.0


@dataclass
class CapacityReport:
    """Per-model rows and the hours the models together exceed the cluster."""

    rows: list[ModelCapacity]
    hours_over_all: list[int] = field(default_factory=list)  # sum of shares > 1
    # model -> why it misses its TTFT target although no hour is beyond its capacity
    slow: dict[str, str] = field(default_factory=dict)

    @property
    def overloaded(self) -> bool:
        """Some model, or all together, beyond capacity in some hour."""
        return bool(self.hours_over_all) or any(r.hours_over for r in self.rows)

    def lines(self) -> list[str]:
        """The table in words (plan `notes`, printed by optimize and evaluate)."""
        out = []
        for r in self.rows:
            if not r.hours_over:
                continue
            out.append(
                f"{r.model}: peak {r.peak_requests_per_h:.0f} requests/h "
                f"({r.peak_prefill_tokens_per_s:.0f} prefill + {r.peak_decode_tokens_per_s:.0f} "
                f"decode tokens/s) > capacity {r.capacity_requests_per_h:.0f} requests/h "
                f"in {len(r.hours_over)} h: hours {ranges(r.hours_over)}"
            )
        if self.hours_over_all:
            out.append(
                f"all models together need more than the whole cluster in "
                f"{len(self.hours_over_all)} h: hours {ranges(self.hours_over_all)}"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        """Plain data (`--json`)."""
        return {
            "overloaded": self.overloaded,
            "models": [r.model_dump(mode="json") for r in self.rows],
            "hours_over_all": self.hours_over_all,
            "slow_within_capacity": self.slow,
        }


def ranges(hours: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7' (at most 8 runs shown)."""
    runs: list[list[int]] = []
    for h in hours:
        if runs and h == runs[-1][1] + 1:
            runs[-1][1] = h
        else:
            runs.append([h, h])
    txt = [f"{a}-{b}" if b > a else str(a) for a, b in runs[:8]]
    return ", ".join(txt) + (f" (+{len(runs) - 8} more)" if len(runs) > 8 else "")


def cluster_capacity_rps(
    cluster: Cluster, candidates: tuple[Candidate, ...], models: list[str]
) -> dict[str, float]:
    """Per model: requests/s with every GPU it fits on (best candidate per GPU group)."""
    out = {m: 0.0 for m in models}
    for node in cluster.nodes:
        for g in node.gpus:
            best: dict[str, float] = {}
            for c in candidates:
                if c.gpu_type == g.spec.name and c.tp <= g.count:
                    v = (g.count // c.tp) * c.capacity_rps
                    best[c.model] = max(best.get(c.model, 0.0), v)
            for m, v in best.items():
                out[m] = out.get(m, 0.0) + v
    return out


def point_capacity_rps(
    point: Point, perfs: dict[str, InstancePerf], demand: dict[str, ModelDemand], slo: Slo
) -> dict[str, float]:
    """Per model: requests/s the point's instances of it sustain together."""
    out: dict[str, float] = {}
    for i in point.instances:
        cap = capacity_rps(perfs[i.id], demand.get(i.model), slo.for_model(i.model).tpot_p95_s)
        out[i.model] = out.get(i.model, 0.0) + cap
    return out


def capacity_report(
    trace: Any, capacity: dict[str, float], *, whole_cluster: bool = True
) -> CapacityReport:
    """Hourly demand of `trace` against `capacity` (model -> requests/s). `whole_cluster`:
    `capacity` gives each model the whole cluster, so the models' shares add up (the hours
    they exceed it together); a point's instances serve only their own model, and its
    models' shares do not add up to anything."""
    t = np.asarray(trace["timestamp"], dtype=float)
    if not len(t):
        return CapacityReport([])
    hour = (np.floor(t / HOUR_S) - np.floor(t.min() / 86400.0) * 24).astype(np.int64)
    n_h = int(hour.max()) + 1
    model = np.asarray(trace["model"], dtype=object).astype(str)
    inp = np.asarray(trace["input_tokens"], dtype=float)
    cached = np.asarray(trace["cached_tokens"], dtype=float) if "cached_tokens" in trace else 0.0
    new = inp - cached  # prompt tokens prefilled, tokens
    out_tok = np.asarray(trace["output_tokens"], dtype=float)
    rows = []
    share = np.zeros(n_h)  # per hour: sum over models of demand / capacity
    for m in sorted(set(model.tolist()), key=lambda x: (x not in capacity, x)):
        sel = model == m
        per_h = np.bincount(hour[sel], minlength=n_h).astype(float)
        j = int(per_h.argmax())
        at = sel & (hour == j)
        cap_h = capacity.get(m, 0.0) * HOUR_S  # requests/h
        share += per_h / cap_h if cap_h > 0 else np.where(per_h > 0, np.inf, 0.0)
        rows.append(
            ModelCapacity(
                model=m,
                peak_requests_per_h=float(per_h[j]),
                peak_prefill_tokens_per_s=round(float(new[at].sum()) / HOUR_S, 3),
                peak_decode_tokens_per_s=round(float(out_tok[at].sum()) / HOUR_S, 3),
                capacity_requests_per_h=round(cap_h, 3),
                hours_over=np.flatnonzero(per_h > cap_h).tolist(),
            )
        )
    over_all = np.flatnonzero(share > 1.0 + 1e-9).tolist() if whole_cluster else []
    return CapacityReport(rows, over_all)


BURST_WINDOW_S = 60.0  # the busiest minute is set against the peak hour's average minute


def slow_within_capacity(
    trace: Any,
    report: CapacityReport,
    ttft_p95_s: dict[str, float],
    switch_p95_s: dict[str, float],
    slo: Slo,
) -> dict[str, str]:
    """Models whose TTFT P95 (`ttft_p95_s`, simulated, switch waits included) misses their
    target although no hour passes their capacity, each with why: waking it (its switch
    P95, `switch_p95_s`), bursts and long prompts (`why_slow`)."""
    out = {}
    for r in report.rows:
        target = slo.for_model(r.model).ttft_p95_s
        got = ttft_p95_s.get(r.model, 0.0)
        if r.hours_over or target is None or not got > target:
            continue
        wake = switch_p95_s.get(r.model, 0.0)
        waking = f"waking it (switch P95 {wake:.3g} s) counts in its TTFT; " if wake else ""
        out[r.model] = (
            f"TTFT P95 {got:.3g} s misses its {target:g} s target although its peak hour "
            f"({r.peak_requests_per_h:.0f} requests) is within capacity "
            f"({r.capacity_requests_per_h:.0f}/h, an hourly average): {waking}"
            f"{why_slow(trace, r.model)}"
        )
    return out


def why_slow(trace: Any, model: str) -> str:
    """Why `model` can miss its TTFT target although its busiest hour is within capacity
    (capacity is an hourly average): its busiest minute against its peak hour's average
    minute (an agent's calls come in bursts), and how long its prompts are to prefill."""
    sel = np.asarray(trace["model"], dtype=object).astype(str) == model
    t = np.sort(np.asarray(trace["timestamp"], dtype=float)[sel])
    if not len(t):
        return ""
    busiest = int((np.searchsorted(t, t + BURST_WINDOW_S, side="left") - np.arange(len(t))).max())
    peak_h = int(np.bincount(np.floor(t / HOUR_S).astype(np.int64)).max())
    new = np.asarray(trace["input_tokens"], dtype=float)[sel]
    if "cached_tokens" in trace:
        new = new - np.asarray(trace["cached_tokens"], dtype=float)[sel]
    return (
        f"its busiest minute had {busiest} requests, {busiest * 60.0 / peak_h:.0f}x its peak "
        f"hour's average minute (an agent's calls come in bursts and queue), and its P95 "
        f"prompt has {np.percentile(new, 95):.0f} tokens to prefill"
    )
