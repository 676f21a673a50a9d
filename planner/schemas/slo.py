"""slo.yaml: latency targets and the share of requests that must meet them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.schemas.common import Strict


class Targets(Strict):
    """P95 targets; None means no target on that metric."""

    ttft_p95_s: float | None = Field(
        default=None, gt=0, le=3600, description="time to first token, s"
    )
    tpot_p95_s: float | None = Field(
        default=None, gt=0, le=60, description="time per output token, s"
    )
    switch_p95_s: float | None = Field(
        default=None, gt=0, le=3600, description="wait for a sleeping model to wake, s"
    )


class Slo(Strict):
    """kind: slo."""

    kind: Literal["slo"] = "slo"
    version: Literal[1] = 1
    default: Targets = Field(default_factory=Targets, description="targets for every model")
    models: dict[str, Targets] = Field(default_factory=dict, description="per-model overrides")
    attainment: float = Field(
        default=0.99, gt=0, le=1, description="share of requests that must meet every target"
    )
    max_quality_cost: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="most quality lost to stand-ins (penalties summed over requests / requests)",
    )

    def for_model(self, model: str) -> Targets:
        """Default targets overlaid with the model's overrides."""
        over = self.models.get(model)
        if over is None:
            return self.default
        merged = self.default.model_dump()
        merged.update({k: v for k, v in over.model_dump().items() if v is not None})
        return Targets(**merged)
