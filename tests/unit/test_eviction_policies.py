"""Eviction policies are objects (`serving_rule.PLAN`, `serving_rule.LRU`) and baselines a registry
(`baselines.BUILDERS`): the same choices as the names they replace (issue 27 item 5)."""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import pytest
from optimizer_builders import perf, point, step_model, trace

from planner.optimizer import baselines, serving_rule
from planner.optimizer.sim.simulator import simulate
from planner.schemas.slo import Slo


@dataclass
class T:
    """A tenant as the serving rule sees it."""

    name: str
    last_used_s: float
    awake_hours: tuple[int, ...] = ()
    awake: bool = True
    lazy: bool = True
    gpus: tuple = (("n", 0),)
    awake_gib: float = 10.0
    context_gib: float = 0.5


def test_names_resolve_to_the_policy_objects_and_others_are_refused():
    assert serving_rule.eviction_policy("plan") is serving_rule.PLAN
    assert serving_rule.eviction_policy("lru") is serving_rule.LRU
    assert serving_rule.eviction_policy(serving_rule.LRU) is serving_rule.LRU
    with pytest.raises(ValueError, match=r"one of \('plan', 'lru'\), not 'fifo'"):
        serving_rule.eviction_policy("fifo")
    with pytest.raises(ValueError, match="not 'fifo'"):
        simulate(point(["host"]), {}, trace([0.0], "m0", 10, 1), Slo(), policy="fifo")


def test_a_policy_is_the_same_after_a_trip_to_a_worker_process():
    for p in (serving_rule.PLAN, serving_rule.LRU):
        back = pickle.loads(pickle.dumps(p))
        assert back == p and back.reactive == p.reactive and back.name == p.name


def test_plan_spares_a_cotenant_within_its_hours_lru_does_not():
    # 20 GiB: the target (10) fits beside one of the two awake co-tenants.
    target = T("t", 0.0, awake=False)
    busy_hours = T("a", last_used_s=0.0, awake_hours=(0,))  # least recently used, in hours
    other = T("b", last_used_s=5.0)
    near = [busy_hours, other]
    cap = {("n", 0): 20.0 + 3 * 0.5}
    plan = serving_rule.displaced(
        target, near, policy=serving_rule.PLAN, capacity_gib=cap, t_s=60.0
    )
    lru = serving_rule.displaced(target, near, policy=serving_rule.LRU, capacity_gib=cap, t_s=60.0)
    assert [c.name for c in plan] == ["b"]
    assert [c.name for c in lru] == ["a"]
    # Without the GPU's capacity the plan keeps one lazy instance awake: all of them sleep.
    assert len(serving_rule.displaced(target, near, policy=serving_rule.PLAN, t_s=60.0)) == 2


def test_simulate_takes_the_object_or_its_name_alike():
    p = perf(step_model(dense_weight_read_s=0.01))
    pt = point(["host"] * 3)
    perfs = {i.id: p for i in pt.instances}
    tr = trace([10, 20, 30, 40, 50], ["m0", "m1", "m2", "m1", "m0"], 100, 5)
    mem = {("n", 0): 40.0}
    by_name = simulate(pt, perfs, tr, Slo(), policy="lru", gpu_memory_gib=mem)
    by_object = simulate(pt, perfs, tr, Slo(), policy=serving_rule.LRU, gpu_memory_gib=mem)
    np.testing.assert_array_equal(by_name.switch_wait_s, by_object.switch_wait_s)
    assert by_name.wakes == by_object.wakes == 2


def test_the_baseline_registry_names_every_builder_and_refuses_others():
    assert baselines.BASELINES == tuple(baselines.BUILDERS) == ("static", "lru", "melange")
    with pytest.raises(ValueError, match="unknown baseline 'fifo'"):
        baselines.build("fifo", None, None, Slo())
    with pytest.raises(ValueError, match="needs the trace"):
        baselines.build("melange", None, None, Slo())
