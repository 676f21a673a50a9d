"""What `select` and `advice` read of a search: its inputs and what it derived from them
(`SearchContext`), and the few operations they ask of it (`Evaluator`), so that neither
needs the whole `Searcher`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from planner.optimizer import schedule, scoring
from planner.optimizer.build import substitute_rules
from planner.optimizer.candidates import Candidate, Knobs
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.demand import ModelDemand, model_demand
from planner.optimizer.perf import Calib
from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.sim.request import Requests
from planner.optimizer.space import sleep_order
from planner.schemas.cluster import Cluster
from planner.schemas.models import Models
from planner.schemas.plan import Point, SubstituteRule
from planner.schemas.slo import Slo

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from planner.optimizer.evaluation import Evaluation


@dataclass(frozen=True)
class SearchContext:
    """The inputs of one optimize run and the tables derived from them."""

    cluster: Cluster
    models: Models
    slo: Slo
    trace: pd.DataFrame  # the whole trace
    cfg: OptimizeConfig
    calib: dict[str, Calib] | None
    validate_days: int  # days held back (0: none)
    fit: pd.DataFrame  # the trace less its held-back days
    held: pd.DataFrame | None  # the held-back days (None: none held back)
    held_days: list[tuple[int, int]]  # (day from 0, requests)
    fit_req: Requests
    held_req: Requests | None
    held_day_req: list[Requests]  # each held-back day apart, in day order
    demand: dict[str, ModelDemand]
    sleep_order: list[str]
    rates: dict[str, np.ndarray]  # schedule.hourly_rates of the fitted days: the forecast
    handoff: dict[str, list[str]]  # schedule.handoffs of the fitted days
    substitutes: dict[str, SubstituteRule]

    @property
    def chosen_req(self) -> Requests:
        """The requests points are chosen on: the held-back days if any, else the fitted."""
        return self.held_req if self.held_req is not None else self.fit_req


def search_context(
    cluster: Cluster,
    models: Models,
    slo: Slo,
    trace: pd.DataFrame,
    cfg: OptimizeConfig,
    calib: dict[str, Calib] | None,
    hold_back: bool,
) -> SearchContext:
    """Split the trace into fitted and held-back days (none when `hold_back` is false: a
    given scorer defines the scoring trace) and derive what the search reads."""
    validate = scoring.validate_days(trace, cfg.validate_days) if hold_back else 0
    fit, held = scoring.split_days(trace, validate, cfg.held_back)
    counts = scoring.day_counts(trace)
    days = scoring.held_back_days(trace, validate, cfg.held_back)
    # rates per day and hour over the fitted days only (held-back ones may lie between)
    fit_days, fit_h = scoring.fit_extent(trace, days)
    demand = model_demand(fit, span_h=fit_h)
    return SearchContext(
        cluster=cluster,
        models=models,
        slo=slo,
        trace=trace,
        cfg=cfg,
        calib=calib,
        validate_days=validate,
        fit=fit,
        held=held if validate else None,
        held_days=[(d, int(counts[d])) for d in days],
        fit_req=scoring.requests(fit, models),
        held_req=scoring.requests(held, models) if validate else None,
        held_day_req=[scoring.requests(d, models) for d in scoring.each_day(held)]
        if validate
        else [],
        demand=demand,
        sleep_order=sleep_order(models, demand),
        rates=schedule.hourly_rates(fit, fit_days),
        handoff=schedule.handoffs(fit, cfg.handoff_min_share),
        substitutes=substitute_rules(models, slo),
    )


def loosest_knobs(cfg: OptimizeConfig) -> Knobs:
    """The knobs that let the most candidates fit: the least KV and the smallest batch."""
    return Knobs(kv_factor=cfg.kv_factor_range[0], max_num_seqs=min(cfg.max_num_seqs_choices))


def roomiest_knobs(cfg: OptimizeConfig) -> Knobs:
    """The knobs of the most capacity per instance: the most KV and the largest batch."""
    return Knobs(
        headroom=0.0, kv_factor=cfg.kv_factor_range[1], max_num_seqs=max(cfg.max_num_seqs_choices)
    )


Job = tuple[Knobs, Point, dict[str, InstancePerf], str]  # knobs, point, perfs, origin


class Evaluator(Protocol):
    """What `select` asks of the search: candidates, scoring of new points, `lru@` twins."""

    def candidates(self, knobs: Knobs) -> tuple[Candidate, ...]: ...

    def evaluate(self, index: int, knobs: Knobs) -> Evaluation: ...

    def evaluated(self, n: int) -> None: ...

    def evaluate_points(self, start: int, jobs: list[Job]) -> list[Evaluation]: ...

    def evaluate_point(
        self, index: int, knobs: Knobs, point: Point, perfs: dict[str, InstancePerf], *, origin: str
    ) -> Evaluation: ...

    def run_twins(self, evs: list[Evaluation]) -> None: ...

    def twin_metrics(self, ev: Evaluation) -> PointMetrics: ...

    def twin_days(self, ev: Evaluation) -> list[tuple[PointMetrics, PointMetrics]]: ...

    def score_on(
        self, req: Requests, jobs: list[tuple[Point, dict[str, InstancePerf]]]
    ) -> list[PointMetrics]: ...

    def twin_on(
        self, req: Requests, point: Point, perfs: dict[str, InstancePerf], warm_gib: float
    ) -> PointMetrics: ...
