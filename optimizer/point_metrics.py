"""What a simulation of one plan point says, typed: the currency of search, select, Pareto,
scoring, advice and the adjuster's policy. Dicts only at the edges: `to_json` gives the
figures of `planner evaluate --json` and of the plan's `search` section (key for key as
before), `from_json` reads them back (a missing figure is 0, as the readers assumed)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelMetrics:
    """One model's figures within a point's simulation."""

    requests: int = 0
    failed: int = 0
    refused: Mapping[str, int] = field(default_factory=dict)  # reason -> requests
    slo_attainment: float = 1.0
    ttft_p95_s: float = 0.0
    tpot_p95_s: float = 0.0
    switch_p95_s: float = 0.0
    switch_count: int = 0
    substituted_share: float = 0.0
    quality_cost: float = 0.0  # per request: the variants' and the stand-ins' (`quality`)
    variant_quality_cost: float = 0.0  # the variants' part of it

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "failed": self.failed,
            "refused": dict(self.refused),
            "slo_attainment": self.slo_attainment,
            "ttft_p95_s": self.ttft_p95_s,
            "tpot_p95_s": self.tpot_p95_s,
            "switch_p95_s": self.switch_p95_s,
            "switch_count": self.switch_count,
            "substituted_share": self.substituted_share,
            "quality_cost": self.quality_cost,
            "variant_quality_cost": self.variant_quality_cost,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModelMetrics:
        return cls(**{k: d[k] for k in _MODEL_KEYS if k in d})


@dataclass(frozen=True)
class PointMetrics:
    """A point's figures on one trace (`SimResult.point_metrics`)."""

    slo_attainment: float = 1.0
    ttft_p95_s: float = 0.0
    tpot_p95_s: float = 0.0
    switch_p95_s: float = 0.0  # P95 over the requests that waited for a wake, s
    switch_count: int = 0  # wakes
    warm_gpu_gib: float = 0.0  # time-average GPU memory held, GiB
    gpus_used: int = 0
    requests: int = 0
    refused: Mapping[str, int] = field(default_factory=dict)  # reason -> requests
    substituted_share: float = 0.0
    quality_cost: float = 0.0  # per request: the variants' and the stand-ins' (`quality`)
    variant_quality_cost: float = 0.0  # the variants' part of it
    per_model: Mapping[str, ModelMetrics] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "slo_attainment": self.slo_attainment,
            "ttft_p95_s": self.ttft_p95_s,
            "tpot_p95_s": self.tpot_p95_s,
            "switch_p95_s": self.switch_p95_s,
            "switch_count": self.switch_count,
            "warm_gpu_gib": self.warm_gpu_gib,
            "gpus_used": self.gpus_used,
            "requests": self.requests,
            "refused": dict(self.refused),
            "substituted_share": self.substituted_share,
            "quality_cost": self.quality_cost,
            "variant_quality_cost": self.variant_quality_cost,
            "per_model": {n: m.to_json() for n, m in self.per_model.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PointMetrics:
        kw: dict[str, Any] = {k: d[k] for k in _POINT_KEYS if k in d}
        if "per_model" in d:
            kw["per_model"] = {n: ModelMetrics.from_json(m) for n, m in d["per_model"].items()}
        return cls(**kw)


_MODEL_KEYS = tuple(ModelMetrics.__dataclass_fields__)
_POINT_KEYS = tuple(k for k in PointMetrics.__dataclass_fields__ if k != "per_model")


def metrics_json(
    table: Mapping[str, PointMetrics | str],
) -> dict[str, dict[str, Any]]:
    """A table of point (or baseline) metrics as plain data: a baseline that could not be
    built (its reason, a string) as {"error": why}."""
    return {n: {"error": m} if isinstance(m, str) else m.to_json() for n, m in table.items()}
