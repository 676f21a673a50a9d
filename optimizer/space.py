"""The Bayesian search's space: knobs as vectors and back, and which models may sleep first."""

from __future__ import annotations

import math
from typing import Any

from planner.optimizer.candidates import Knobs
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.demand import ModelDemand
from planner.optimizer.evaluation import Evaluation
from planner.optimizer.point_metrics import PointMetrics
from planner.schemas.models import Models


def sleep_order(models: Models, demand: dict[str, ModelDemand]) -> list[str]:
    """Models in the order they are allowed to sleep: least requested first, then by priority."""

    def key(m):
        d = demand.get(m.name)
        return (m.priority, d.share if d else 0.0, m.name)

    return [m.name for m in sorted(models.models, key=key)]


def knobs_from_vector(v: list[Any], sleep_order: list[str]) -> Knobs:
    """Decode one search vector into knobs (see `search_space`)."""
    headroom, kv_factor, seqs, log_ws, log_wm, n_sleep = v
    return Knobs(
        headroom=float(headroom),
        kv_factor=float(kv_factor),
        max_num_seqs=int(seqs),
        w_switch=10.0 ** float(log_ws),
        w_memory=10.0 ** float(log_wm),
        may_sleep=frozenset(sleep_order[: int(n_sleep)]),
    )


def search_space(cfg: OptimizeConfig, n_models: int):
    from skopt.space import Categorical, Integer, Real

    return [
        Real(*cfg.headroom_range, name="headroom"),
        Real(*cfg.kv_factor_range, name="kv_factor"),
        Categorical(list(cfg.max_num_seqs_choices), name="max_num_seqs"),
        Real(-2.0, 2.0, name="log10_w_switch"),
        Real(-2.0, 1.0, name="log10_w_memory"),
        Integer(0, n_models, name="n_may_sleep"),
    ]


def knobs_vector(k: Knobs) -> list[Any]:
    """One search vector from knobs (the inverse of `knobs_from_vector`)."""
    return [
        k.headroom,
        k.kv_factor,
        k.max_num_seqs,
        math.log10(k.w_switch),
        math.log10(k.w_memory),
        len(k.may_sleep),
    ]


def better(best: PointMetrics | None, ev: Evaluation, target: float) -> PointMetrics | None:
    """The better of `best` and `ev`'s metrics: meeting the target first, then the lower
    switch P95 + warm GiB / 100 (the progress line's "best")."""
    if not ev.feasible:
        return best
    cand = ev.metrics
    if best is None:
        return cand

    def key(m: PointMetrics) -> tuple[bool, float]:
        return (m.slo_attainment < target, m.switch_p95_s + m.warm_gpu_gib / 100.0)

    return cand if key(cand) < key(best) else best
