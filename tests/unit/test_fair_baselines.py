"""Issue 13: the lru@POINT twin, never-dominated points under overload with the capacity
table, held-back days, the compiled engine's identical numbers, tier-only hops."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli
from optimizer_builders import perf, point, step_model, trace

from planner.optimizer import scoring
from planner.optimizer.baselines import lru_matched
from planner.optimizer.hops import hop
from planner.optimizer.pareto import dominates
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.sim import simulator
from planner.optimizer.sim.simulator import simulate
from planner.schemas import load_cluster, load_plan
from planner.schemas.slo import Slo

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "small"
P = perf(step_model(dense_weight_read_s=0.01))  # awake 16 GiB per GPU, context 0.5 GiB


def test_warm_budget_evicts_the_least_recently_used_anywhere():
    # Two models on two GPUs: each fits its own GPU, but the budget holds one awake at a time
    # (16 + 2 x 0.5 < 18 < 2 x 16): the other model, on another GPU, is put to sleep.
    pt = point(["host", "host"], gpus=[[0], [1]])
    perfs = {i.id: P for i in pt.instances}
    tr = trace([10, 20, 30], ["m0", "m1", "m0"], 100, 5)
    mem = {("n", 0): 40.0, ("n", 1): 40.0}
    free = simulate(pt, perfs, tr, Slo(), policy="lru", gpu_memory_gib=mem)
    assert free.wakes == 0
    r = simulate(pt, perfs, tr, Slo(), policy="lru", gpu_memory_gib=mem, warm_budget_gib=18.0)
    assert r.wakes == 2 and r.switch_wait_s[1] > 0 and r.switch_wait_s[2] > 0
    assert r.warm_gpu_gib <= 18.0 + 1e-9


def test_twin_keeps_instances_and_stays_within_the_points_warm_gib():
    cl = load_cluster(SMALL / "cluster.yaml")
    pt = point(["gpu", "host", "host"], gpus=[[0], [1], [1]])
    pt = pt.model_copy(
        update={"instances": [i.model_copy(update={"node": "n0"}) for i in pt.instances]}
    )
    perfs = {i.id: P for i in pt.instances}
    tr = trace([10, 20, 30, 40, 50, 60], ["m0", "m1", "m2", "m1", "m2", "m0"], 100, 5)
    m = simulate(pt, perfs, tr, Slo()).to_metrics()
    b = lru_matched(pt, perfs, cl, m["warm_gpu_gib"])
    assert b.point.name == f"lru@{pt.name}"
    for a, t in zip(pt.instances, b.point.instances, strict=True):
        assert (a.id, a.node, a.gpus, a.variant, a.tp) == (t.id, t.node, t.gpus, t.variant, t.tp)
        assert t.tier != "gpu"
    r = simulate(b.point, b.perfs, tr, Slo(), **b.simulate_kwargs())
    assert r.warm_gpu_gib <= m["warm_gpu_gib"] + 1e-9


def test_twin_raises_its_warm_cap_as_far_as_its_time_average_allows():
    # The point holds ~30 GiB on average. A twin capped at that at every instant cannot hold
    # both 16-GiB instances awake (its own average drops to ~22 GiB) and swaps more; the
    # twin's cap rises by what it left unused while its time-average stays within the
    # point's, so it swaps less at the same memory (issue 13: same or lower time-average).
    cl = load_cluster(SMALL / "cluster.yaml")
    pt = point(["host", "host", "host"], gpus=[[1], [0], [1]])
    pt = pt.model_copy(
        update={"instances": [i.model_copy(update={"node": "n0"}) for i in pt.instances]}
    )
    small = perf(step_model(dense_weight_read_s=0.01), weights_gib_per_gpu=4.0, kv_gib_per_gpu=2.0)
    perfs = {"i0": P, "i1": P, "i2": small}
    ts = [15, 294, 435, 485, 930, 1061, 1397, 1691]
    tr = trace(ts, ["m1", "m0", "m2", "m2", "m0", "m0", "m1", "m0"], 100, 5)
    warm = simulate(pt, perfs, tr, Slo()).warm_gpu_gib
    b = lru_matched(pt, perfs, cl, warm)
    at_avg = simulate(b.point, b.perfs, tr, Slo(), **b.simulate_kwargs())
    got = scoring.twin_result(pt, perfs, warm, cl, Slo(), tr, None)
    assert got.warm_gpu_gib <= warm + 1e-6
    assert got.warm_gpu_gib > at_avg.warm_gpu_gib + 4.0
    assert got.wakes < at_avg.wakes


def test_evaluate_lru_matched_twins_every_point(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    plan = ROOT / "tests" / "golden" / "plan_small.yaml"
    tr = tmp_path / "t.csv"
    tr.write_text(
        "timestamp,model,input_tokens,output_tokens\n"
        + "".join(
            f"{10 * k},{m},500,50\n"
            for k, m in enumerate(["planner-7b", "coder-32b", "summarizer-8b"] * 5)
        )
    )
    args = ["evaluate", str(plan), "--workload", str(tr), "--all-points"]
    code, out, _ = run_cli([*args, "--baseline", "lru-matched", "--json"], capsys)
    assert code == 0
    got = json.loads(out)
    names = [p.name for p in load_plan(plan).points]
    assert list(got["points"]) == [x for n in names for x in (n, f"lru@{n}")]
    for n in names:
        assert got["points"][f"lru@{n}"]["warm_gpu_gib"] <= got["points"][n]["warm_gpu_gib"] + 1e-6
        assert got["capacity"][n]["overloaded"] is False
    code, _, err = run_cli(["evaluate", "--workload", str(tr), "--baseline", "lru-matched"], capsys)
    assert code == 2 and "give a PLAN" in err


def test_overload_no_point_dominated_and_capacity_table_names_models_and_hours(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(ROOT)
    (tmp_path / "w.yaml").write_text("users: 150\ndays: 1\nstationary: true\n")
    out = tmp_path / "p.yaml"
    code, stdout, _ = run_cli(
        [
            "optimize",
            "-c",
            f"{SMALL}/cluster.yaml",
            "-m",
            f"{SMALL}/models.yaml",
            "-s",
            f"{SMALL}/slo.yaml",
            "-w",
            str(tmp_path / "w.yaml"),
            "--evals",
            "4",
            "--json",
            "-o",
            str(out),
        ],
        capsys,
    )
    assert code == 0
    got = json.loads(stdout)
    assert got["validate_days"] == 0  # one day: nothing held back
    bases = [m for m in got["baselines"].values() if "error" not in m]
    assert len(bases) == 3
    for name, m in got["points_fit"].items():
        fit = PointMetrics.from_json(m)
        assert not any(dominates(PointMetrics.from_json(b), fit) for b in bases), name
    cap = got["capacity"]
    assert cap["overloaded"]
    over = {r["model"]: r["hours_over"] for r in cap["models"] if r["hours_over"]}
    assert "coder-32b" in over and all(9 <= h <= 17 for h in over["coder-32b"])
    plan = load_plan(out)
    assert any(n.startswith("coder-32b: peak") and "hours" in n for n in plan.notes)
    assert [r.model for r in plan.capacity if r.hours_over] == list(over)
    # issue 41 item 9: two points one hop apart (sleeps and wakes), or the plan says why not
    sel = plan.selected
    rungs = [p for p in plan.points if p.name == sel or plan.hops[sel][p.name].restarts == 0]
    why = [n for n in plan.notes if n.startswith("one point on the ladder: no plan meets")]
    assert len(rungs) >= 2 or why


def test_held_back_days_split_and_default():
    t = {"timestamp": np.array([0.0, 90000.0, 200000.0, 300000.0, 400000.0])}
    import pandas as pd

    df = pd.DataFrame({**t, "model": ["a"] * 5})
    assert scoring.trace_days(df) == 5
    assert scoring.validate_days(df, None) == 2
    assert scoring.validate_days(df.iloc[:4], None) == 0
    fit, held = scoring.split_days(df, 2)
    assert fit["timestamp"].tolist() == [0.0, 90000.0, 200000.0]
    assert held["timestamp"].tolist() == [300000.0, 400000.0]
    fit, held = scoring.split_days(df, 2, "spread")  # one request a day: ranks 1 and 3
    # each part closed up: the other part's days inside it are left out of its timeline
    assert fit["timestamp"].tolist() == [0.0, 200000.0 - 86400, 400000.0 - 2 * 86400]
    assert held["timestamp"].tolist() == [90000.0, 300000.0 - 86400]
    # a week whose last two days are its quiet weekend: one quiet and one busy day held back
    week = pd.DataFrame(
        {
            "timestamp": [
                d * 86400.0 + s for d, n in enumerate([9, 8, 7, 9, 8, 1, 2]) for s in range(n)
            ],
            "model": "a",
        }
    )
    assert scoring.held_back_days(week, 2, "spread") == [0, 6]  # ranks 1 and 5 of 7
    assert scoring.held_back_days(week, 2, "last") == [5, 6]
    assert scoring.held_back_days(week, 2) == [4, 6]  # the default: `week`


def test_hop_between_points_of_one_placement_is_sleeps_and_wakes():
    """Same processes on other tiers: sleeps and wakes, no restart; another GPU restarts."""
    plan = load_plan(ROOT / "tests" / "golden" / "plan_small.yaml")
    b = plan.points[0]
    a = b.model_copy(
        update={"instances": [i.model_copy(update={"tier": "gpu"}) for i in b.instances]}
    )
    assert any(i.tier != "gpu" for i in b.instances)
    perfs = {i.id: P for i in b.instances}
    h = hop(a, b, perfs)
    assert h.restarts == 0 and h.sleeps > 0 and h.cost_s == pytest.approx(h.sleeps * P.sleep_s)
    assert hop(b, a, perfs).wakes == h.sleeps
    moved = b.model_copy(deep=True)
    moved.instances[0].gpus = [7]
    assert hop(a, moved, perfs).restarts == 1
    # the table the plan stores counts as the same function does (its perfs are the plan's)
    x, y = plan.points[0], plan.points[1]
    stored, counted = plan.hops[x.name][y.name], hop(x, y, perfs)
    assert (stored.restarts, stored.wakes, stored.sleeps) == (
        counted.restarts,
        counted.wakes,
        counted.sleeps,
    )


@pytest.mark.skipif(
    not __import__("planner.optimizer.sim.kernel", fromlist=["AVAILABLE"]).AVAILABLE,
    reason="numba is not installed: only the pure-Python engine runs",
)
def test_compiled_engine_gives_identical_numbers():
    # Busy lab16 week slices, without and with step-time jitter (batching, preemption, MoE and TP steps, routed co-tenants).
    import sys

    sys.path.insert(0, str(ROOT / "bench" / "lib"))
    from lab16 import lab16

    from planner.optimizer import baselines

    cl, ms, sl, tr = lab16(seed=3, users=60)
    tr = tr[tr["timestamp"] < 86400.0 + 14 * 3600].reset_index(drop=True)
    req = scoring.requests(tr, ms)
    built = [baselines.build(n, cl, ms, sl, tr) for n in ("static", "lru")]
    todo = [(b.point, b.perfs, b.simulate_kwargs()) for b in built]
    todo.append((built[1].point, built[1].perfs, {}))  # lru's homes, time-shared by plan
    # Replicas that never sleep (one compiled call per model, `sim.replicas`): three of the
    # coder, two of the reasoner, one of them with a smaller batch cap and KV cache.
    st = built[0]
    insts, perfs = [], dict(st.perfs)
    for i in st.point.instances:
        insts.append(i)
        for k in (1, 2) if i.model == "coder-32b" else (1,) if i.model == "reasoner-30b" else ():
            rep = i.model_copy(update={"id": f"{i.model}-{k}"})
            insts.append(rep)
            small = dataclasses.replace(perfs[i.id], max_num_seqs=4, max_kv_tokens=40000)
            perfs[rep.id] = small if k == 2 or i.model == "reasoner-30b" else perfs[i.id]
    todo.append((st.point.model_copy(update={"instances": insts}), perfs, {}))
    # The same with step-time jitter (each engine draws several seeded blocks of multipliers)
    todo += [
        (pt, {k: dataclasses.replace(p, step_jitter_cv=0.25) for k, p in perfs.items()}, kw)
        for pt, perfs, kw in todo
    ]
    # A per-sequence step cost (the CPU build's `StepModel.seq_s`) in general steps and decode runs
    pt, perfs, kw = todo[0]
    todo.append(
        (
            pt,
            {
                k: dataclasses.replace(p, step=dataclasses.replace(p.step, seq_s=3e-4))
                for k, p in perfs.items()
            },
            kw,
        )
    )
    # The CPU build's split request overheads, the wake-up scaled by the engine's idle time
    curve = ((0.005, 0.0), (0.05, 0.4), (0.3, 1.0), (1.5, 1.3))
    todo.append(
        (
            pt,
            {
                k: dataclasses.replace(
                    p, busy_prefill_overhead_s=p.prefill_overhead_s / 2, idle_wake_curve=curve
                )
                for k, p in perfs.items()
            },
            kw,
        )
    )
    for pt, perfs, kw in todo:
        runs = []
        for compiled in (False, True):
            simulator.clear_caches()
            runs.append(simulate(pt, perfs, req, sl, model_names=ms.names, compiled=compiled, **kw))
        a, b = runs
        for k in ("ttft_s", "tpot_s", "switch_wait_s", "instance", "met_slo", "cache_hit"):
            assert np.array_equal(getattr(a, k), getattr(b, k), equal_nan=True), k
        assert (a.warm_gpu_gib, a.preemptions, a.gpu_busy_fraction, a.wakes) == (
            b.warm_gpu_gib,
            b.preemptions,
            b.gpu_busy_fraction,
            b.wakes,
        )
    assert os.environ.get("NUMBA_DISABLE_JIT") != "1"
