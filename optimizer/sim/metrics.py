"""What a simulation reports: per-request latencies, SLO attainment, percentiles, warm memory.

Conventions:
- TTFT = first token - arrival; TPOT = (last token - first token) / (output tokens - 1),
  only for requests with more than one output token; E2E = last token - arrival.
- switch wait: time a request spent waiting for a wake (0 if it found its model awake).
  `switch_p95_s` is the P95 over the requests that did wait (a switch is the event the
  SLO is about), 0 when none did. `switch_count` counts wakes.
- A request meets its SLOs when each target that applies to its model holds for it:
  ttft - switch wait <= ttft_p95_s (the TTFT target is about a model that is awake,
  docs/file-formats.md; the wake itself is what the switch target bounds), tpot <= tpot_p95_s,
  switch wait <= switch_p95_s. A request for a model that has no instance, or whose prompt
  leaves no room for an output token in its instances' max_model_len (vLLM refuses it), is
  failed: counted, never met; `refused` counts them by reason. So is a request the gateway
  would refuse because its model's awake instances and queue are full (`admission`, reason
  `refused_queue_full`). Reported TTFT percentiles
  include the switch wait (what users feel).
- A request a stand-in answered (the model's `substitutes`) waited for no wake: it meets the
  switch target, and its TTFT/TPOT are the stand-in's, held to the requested model's
  targets. `substituted_share` is the share of requests stand-ins answered, `quality_cost`
  the sum of their quality penalties over all requests (overall and per requested model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.optimizer.admission import REFUSED_QUEUE_FULL
from planner.optimizer.point_metrics import ModelMetrics, PointMetrics
from planner.schemas.slo import Slo

if TYPE_CHECKING:
    from planner.optimizer.sim.event import Timeline
    from planner.optimizer.sim.request import Outcome, Requests
    from planner.optimizer.sim.router import Slot
    from planner.schemas.plan import Point

QUANTILES = (50, 95, 99)


def percentiles(x: np.ndarray) -> dict[str, float]:
    """P50/P95/P99 of the finite values (0 when there are none)."""
    x = x[np.isfinite(x)]
    if not len(x):
        return {f"p{q}": 0.0 for q in QUANTILES}
    vals = np.percentile(x, QUANTILES)
    return {f"p{q}": float(v) for q, v in zip(QUANTILES, vals, strict=True)}


def met_slo(
    model: np.ndarray,
    model_names: tuple[str, ...],
    ttft_s: np.ndarray,
    tpot_s: np.ndarray,
    switch_wait_s: np.ndarray,
    slo: Slo,
) -> np.ndarray:
    """Per request: served and within every target of its model."""
    # Per-model targets as arrays indexed by model (inf: no such target).
    ttft_t, tpot_t, switch_t = (np.full(len(model_names), np.inf) for _ in range(3))
    for m, name in enumerate(model_names):
        tg = slo.for_model(name)
        for arr, v in (
            (ttft_t, tg.ttft_p95_s),
            (tpot_t, tg.tpot_p95_s),
            (switch_t, tg.switch_p95_s),
        ):
            if v is not None:
                arr[m] = v
    ok = np.isfinite(ttft_s)
    ok &= ttft_s - switch_wait_s <= ttft_t[model]  # a first token once the model is awake
    ok &= ~(tpot_s > tpot_t[model])  # NaN (single-token output): no TPOT to miss
    ok &= switch_wait_s <= switch_t[model]
    return ok


@dataclass
class SimResult:
    """Everything one simulation of one point on one trace produced."""

    model_names: tuple[str, ...]
    arrival_s: np.ndarray
    model: np.ndarray
    instance: np.ndarray  # serving instance index, -1: failed
    ttft_s: np.ndarray  # NaN: failed
    tpot_s: np.ndarray  # NaN: failed or one output token
    e2e_s: np.ndarray
    switch_wait_s: np.ndarray
    met_slo: np.ndarray
    cache_hit: np.ndarray
    instance_ids: tuple[str, ...]
    start_s: float
    end_s: float
    warm_gpu_gib_hours: float  # GiB x hours of GPU memory held (awake + sleeping contexts)
    warm_gpu_gib: float  # time-average of the same, GiB
    wakes: int
    sleeps: int
    wakes_by_instance: tuple[int, ...]
    gpu_busy_fraction: float  # share of (GPU x time) with a step running
    gpus_used: int
    preemptions: int
    memory_curve: tuple[np.ndarray, np.ndarray]  # (times s, warm GiB from each time)
    instance_models: tuple[int, ...]  # model index of every instance (-1: not in the trace)
    over_context: np.ndarray | None = None  # bool: refused, the prompt exceeds max_model_len
    queue_full: np.ndarray | None = None  # bool: refused, the model's admission bound reached
    substituted: np.ndarray | None = None  # bool: a stand-in answered
    quality_penalty: np.ndarray | None = None  # its quality penalty (0: the model itself)

    @property
    def requests(self) -> int:
        """Requests in the trace (each counted exactly once)."""
        return len(self.arrival_s)

    @property
    def failed(self) -> int:
        """Requests no instance could serve."""
        return int((self.instance < 0).sum())

    def refused(self, sel: np.ndarray | None = None) -> dict[str, int]:
        """Unserved requests by reason (of those in `sel`): over_context, refused_queue_full
        (`admission.REFUSED_QUEUE_FULL`: the gateway would answer 503), no_instance."""
        sel = np.ones(self.requests, dtype=bool) if sel is None else sel
        over = self.over_context if self.over_context is not None else np.zeros_like(sel)
        full = self.queue_full if self.queue_full is not None else np.zeros_like(sel)
        return {
            "over_context": int((sel & over).sum()),
            REFUSED_QUEUE_FULL: int((sel & full).sum()),
            "no_instance": int((sel & ~over & ~full & (self.instance < 0)).sum()),
        }

    @property
    def slo_attainment(self) -> float:
        """Share of all requests that met every SLO that applies to them."""
        return float(self.met_slo.mean()) if self.requests else 1.0

    @property
    def switched(self) -> np.ndarray:
        """Mask of requests that waited for a wake."""
        return self.switch_wait_s > 0

    def stand_ins(self, sel: np.ndarray | None = None) -> tuple[float, float]:
        """(substituted share, quality cost) of the requests in `sel` (default: all)."""
        sel = np.ones(self.requests, dtype=bool) if sel is None else sel
        n = int(sel.sum())
        if not n or self.substituted is None or self.quality_penalty is None:
            return 0.0, 0.0
        return float(self.substituted[sel].mean()), float(self.quality_penalty[sel].sum() / n)

    def _summary(self, sel: np.ndarray) -> dict[str, Any]:
        sw = self.switch_wait_s[sel & self.switched]
        return {
            "ttft_s": percentiles(self.ttft_s[sel]),
            "tpot_s": percentiles(self.tpot_s[sel]),
            "e2e_s": percentiles(self.e2e_s[sel]),
            "switch_wait_s": percentiles(sw),
        }

    @property
    def overall(self) -> dict[str, Any]:
        """P50/P95/P99 of TTFT, TPOT, E2E and switch wait over all requests."""
        return self._summary(np.ones(self.requests, dtype=bool))

    @property
    def per_model(self) -> dict[str, dict[str, Any]]:
        """The same percentiles per model."""
        return {n: self._summary(self.model == m) for m, n in enumerate(self.model_names)}

    def to_metrics(self) -> dict[str, Any]:
        """The per-point figures of `planner evaluate --json`."""
        return self.point_metrics().to_json()

    def point_metrics(self) -> PointMetrics:
        """The per-point figures, typed."""
        per: dict[str, ModelMetrics] = {}
        for m, name in enumerate(self.model_names):
            sel = self.model == m
            s = self._summary(sel)
            n = int(sel.sum())
            share, cost = self.stand_ins(sel)
            per[name] = ModelMetrics(
                requests=n,
                failed=int((sel & (self.instance < 0)).sum()),
                refused=self.refused(sel),
                slo_attainment=float(self.met_slo[sel].mean()) if n else 1.0,
                ttft_p95_s=s["ttft_s"]["p95"],
                tpot_p95_s=s["tpot_s"]["p95"],
                switch_p95_s=s["switch_wait_s"]["p95"],
                switch_count=sum(
                    w
                    for w, im in zip(self.wakes_by_instance, self.instance_models, strict=True)
                    if im == m
                ),
                substituted_share=share,
                quality_cost=cost,
            )
        o = self.overall
        share, cost = self.stand_ins()
        return PointMetrics(
            slo_attainment=self.slo_attainment,
            ttft_p95_s=o["ttft_s"]["p95"],
            tpot_p95_s=o["tpot_s"]["p95"],
            switch_p95_s=o["switch_wait_s"]["p95"],
            switch_count=self.wakes,
            warm_gpu_gib=self.warm_gpu_gib,
            gpus_used=self.gpus_used,
            requests=self.requests,
            refused=self.refused(),
            substituted_share=share,
            quality_cost=cost,
            per_model=per,
        )


def measure(
    point: Point,
    req: Requests,
    out: Outcome,
    slots: list[Slot],
    timeline: Timeline,
    t0: float,
    end_s: float,
    slo: Slo,
    over_context: np.ndarray,
    queue_full: np.ndarray,
) -> SimResult:
    """The report of a finished run: per-request latencies from `out`, the warm memory the
    slots held over [t0, end_s] from `timeline`."""
    a = req.arrival_s
    ttft = out.first_token_s - a
    e2e = out.finish_s - a
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(
            req.output_tokens > 1,
            (out.finish_s - out.first_token_s) / (req.output_tokens - 1),
            np.nan,
        )
    met = met_slo(req.model, req.model_names, ttft, tpot, out.switch_wait_s, slo)
    duration_s = max(end_s - t0, 1e-9)
    gib_s = 0.0  # GiB x seconds held
    awake_gib: dict[int, float] = {}
    asleep_gib: dict[int, float] = {}
    for s in slots:
        tp = len(s.gpus)
        awake_gib[s.index] = s.awake_gib * tp
        asleep_gib[s.index] = s.context_gib * tp if s.tier != "gpu" else 0.0
        up = timeline.awake_s(s.index, end_s)
        gib_s += up * awake_gib[s.index] + max(duration_s - up, 0.0) * asleep_gib[s.index]
    curve = timeline.curve(awake_gib, asleep_gib, end_s)
    # An empty trace has no span: report what is held at the start.
    held_gib = sum(awake_gib[s.index] if s.awake else asleep_gib[s.index] for s in slots)
    avg_gib = gib_s / duration_s if end_s > t0 else held_gib
    gpus = {g for s in slots for g in s.gpus}
    busy_gpu_s = sum(s.engine.busy_s * len(s.gpus) for s in slots)
    return SimResult(
        model_names=req.model_names,
        arrival_s=a,
        model=req.model,
        instance=out.instance,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        switch_wait_s=out.switch_wait_s,
        met_slo=met,
        cache_hit=out.cache_hit,
        instance_ids=tuple(s.id for s in slots),
        start_s=t0,
        end_s=end_s,
        warm_gpu_gib_hours=gib_s / 3600.0,
        warm_gpu_gib=avg_gib,
        wakes=timeline.count("wake"),
        sleeps=timeline.count("sleep"),
        wakes_by_instance=tuple(s.wakes for s in slots),
        gpu_busy_fraction=min(busy_gpu_s / (len(gpus) * duration_s), 1.0) if gpus else 0.0,
        gpus_used=len(gpus),
        preemptions=sum(s.engine.preemptions for s in slots),
        memory_curve=curve,
        instance_models=tuple(s.model for s in slots),
        over_context=over_context,
        queue_full=queue_full,
        substituted=out.substituted,
        quality_penalty=out.quality_penalty,
    )
