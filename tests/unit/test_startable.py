"""Only points vLLM would start (issue 30 item 1): every instance's KV cache holds one
`max_model_len` sequence, in the baselines, the optimizer's candidates and `validate` alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.optimizer import scoring
from planner.optimizer.invariants import plan_problems
from planner.optimizer.sim.perfs import perf_for_instance
from planner.schemas import load_cluster, load_models, load_slo
from planner.schemas.plan import Plan

ROOT = Path(__file__).resolve().parents[2]
LAB16 = ROOT / "plans" / "examples" / "lab16"


@pytest.fixture(scope="module")
def lab16():
    from planner.app import files as inputs
    from planner.optimizer.workload.synth import synth
    from planner.optimizer.workload.synth_spec import bind_models

    cl = load_cluster(LAB16 / "cluster.yaml")
    ms = load_models(LAB16 / "models.yaml")
    sl = load_slo(LAB16 / "slo.yaml")
    spec, _ = bind_models(inputs.synth_spec(LAB16 / "workload.yaml"), ms.names)
    return cl, ms, sl, synth(spec, seed=0)


def test_every_baseline_instance_holds_one_max_model_len_sequence(lab16):
    """Before: static, lru and melange put tools-20b (bf16) on one L40S with 0.27-0.77 GiB of
    KV at max_model_len 32768 (the old rule asked for min(max_context, 8192) tokens)."""
    cl, ms, sl, trace = lab16
    built = scoring.build_baselines(cl, ms, sl, trace)
    short = [
        (name, i.id, i.memory_gib.kv, i.engine.max_model_len)
        for name, b in built.items()
        for i in b.point.instances
        if not perf_for_instance(i, cl, ms).fits
    ]
    assert not short
    for name, b in built.items():  # and `validate`'s check agrees
        plan = Plan(selected=b.point.name, points=[b.point])
        problems = [p.message for p in plan_problems(plan, cl, ms) if "sequence" in p.message]
        assert not problems, (name, problems)


def test_the_optimizers_candidates_all_start(lab16):
    """The MILP's candidates follow the same rule (`InstancePerf.fits` on what they record)."""
    from planner.optimizer.candidates import Knobs, enumerate_candidates
    from planner.optimizer.demand import model_demand

    cl, ms, sl, trace = lab16
    cands = enumerate_candidates(
        cl,
        ms,
        sl,
        model_demand(trace),
        Knobs(),
        max_tp=8,
        max_model_len_cap=None,
        gpu_margin=0.0,
    )
    assert cands and all(c.perf.max_kv_tokens >= c.max_model_len for c in cands)


def test_every_candidate_starts_as_the_plan_records_it(lab16):
    """Issue 41 item 9: lab16's points put tools-20b (mxfp4) on an RTX-3090 with a KV budget
    of exactly one 32768-token sequence (0.7734 GiB), which the plan recorded rounded down
    to 0.773 GiB: 32,749 tokens, so vLLM (and `perf_for_instance`, what `validate` and
    `estimate` compute) said one sequence does not fit. Every candidate, built into a plan
    instance, holds one `max_model_len` sequence in the KV cache the plan records."""
    from planner.optimizer.build import build_point
    from planner.optimizer.candidates import Knobs, enumerate_candidates, gpu_sets
    from planner.optimizer.demand import model_demand
    from planner.optimizer.milp import Placement

    cl, ms, sl, trace = lab16
    cands = enumerate_candidates(
        cl,
        ms,
        sl,
        model_demand(trace),
        Knobs(),
        max_tp=8,
        max_model_len_cap=None,
        gpu_margin=0.06,
    )
    sets = {}  # one GPU set of each (type, size) the cluster has
    for g in gpu_sets(cl, 8):
        sets.setdefault((g.gpu_type, len(g.gpus)), g)
    short = []
    for c in cands:
        gset = sets.get((c.gpu_type, c.tp))
        if gset is None:
            continue
        point, _ = build_point("p", (Placement(cand=c, gset=gset, tier="gpu"),), ms.names)
        perf = perf_for_instance(point.instances[0], cl, ms)
        if not perf.fits:
            short.append((c.key, perf.max_kv_tokens, c.max_model_len))
    assert not short
