"""The optimizer with declared stand-ins (issue 17 item 3): every point carries the models'
rules, the search scores variants where the covered models keep no awake hours (and sleep
sooner), quality cost enters the objective with its weight, and the SLO's max_quality_cost
bounds the pool points are chosen from."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.app import files as inputs
from planner.optimizer.build import substitute_rules
from planner.optimizer.candidates import Knobs
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.evaluation import Evaluation
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.quality import stand_in_quality_cost
from planner.optimizer.search import (
    DEFAULT_QUALITY_WEIGHT,
    SearchInputs,
    optimize,
    quality_weight,
)
from planner.optimizer.select import _pool
from planner.schemas import load_cluster, load_models, load_slo
from planner.schemas.models import Substitute

SMALL = Path(__file__).resolve().parents[1] / "data" / "small"
COVERED = "summarizer-8b"
CFG = OptimizeConfig(evals=8, seed=1, baselines=False, covered_idle_sleep_s=300.0)


@pytest.fixture(scope="module")
def run():
    cl = load_cluster(SMALL / "cluster.yaml")
    ms = load_models(SMALL / "models.yaml")
    sl = load_slo(SMALL / "slo.yaml")
    m = ms.model(COVERED)
    m.substitutes = [Substitute(model="planner-7b", quality_penalty=0.1)]
    m.substitute_when = "always_while_waking"
    trace = inputs.workload(SMALL / "workload.yaml", ms, 1)
    inputs.silence_solver_banner()
    return ms, sl, optimize(SearchInputs(cl, ms, sl, trace, CFG))


def test_every_point_carries_the_rules(run):
    ms, sl, res = run
    rules = substitute_rules(ms, sl)
    assert list(rules) == [COVERED] and rules[COVERED].max_wait_s == 15.0
    assert all(p.substitutes == rules for p in res.points)


def test_variants_keep_covered_models_asleep_and_stand_ins_answer(run):
    _, _, res = run
    covered = [
        e
        for e in res.evaluations
        if e.origin == "schedule"
        and all(not i.awake_hours for i in e.point.instances if i.model == COVERED)
        and any(i.awake_hours for i in e.point.instances if i.model != COVERED)
    ]
    assert {e.point.idle_sleep_s for e in covered} == {CFG.idle_sleep_s, 300.0}
    answered = [e for e in covered if e.metrics.substituted_share > 0]
    assert answered, "no stand-in ever answered: the variants test nothing"
    for e in answered:  # the penalty of each answer, over all requests (the variants' apart)
        m = e.metrics
        assert stand_in_quality_cost(m) == pytest.approx(0.1 * m.substituted_share)
        assert m.per_model["planner-7b"].substituted_share == 0.0


def test_quality_weight_default_and_override():
    sl = load_slo(SMALL / "slo.yaml")
    assert quality_weight(OptimizeConfig(), sl) == DEFAULT_QUALITY_WEIGHT
    limited = sl.model_copy(update={"max_quality_cost": 0.02})
    assert quality_weight(OptimizeConfig(), limited) == pytest.approx(50.0)
    assert quality_weight(OptimizeConfig(quality_weight=3.0), limited) == 3.0


def _ev(i: int, attainment: float, quality_cost: float) -> Evaluation:
    m = PointMetrics(slo_attainment=attainment, quality_cost=quality_cost)
    return Evaluation(i, Knobs(), None, None, {}, m, held=m)


def test_max_quality_cost_bounds_the_pool():
    evs = [_ev(0, 0.99, 0.05), _ev(1, 0.95, 0.01), _ev(2, 0.80, 0.0)]
    pool, meets = _pool(evs, 0.9, max_quality_cost=0.02)
    assert [e.index for e in pool] == [1] and meets
    pool, _ = _pool(evs, 0.9)  # no limit: both that meet the target
    assert [e.index for e in pool] == [0, 1]
    # no point within the limit: the limit cannot be kept, the pool is as without it
    pool, _ = _pool(evs[:1], 0.9, max_quality_cost=0.02)
    assert [e.index for e in pool] == [0]
