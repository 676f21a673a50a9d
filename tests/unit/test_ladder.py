"""The ladder (issue 41 item 1): the plan's points share a placement and differ in tiers,
awake hours and idle sleep, so a hop between them sleeps and wakes and restarts nothing; a
hop that moves models records its restarts, their seconds and the GiB they load; points on
other placements stay only where they pay for their restarts (optimizer/ladder.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helpers import run_cli

from planner.optimizer.hops import hop, placement_key
from planner.optimizer.ladder import pays, rung_points, thin, tiers_key
from planner.optimizer.point_metrics import PointMetrics
from planner.schemas import load_plan
from planner.schemas.plan import Hop, Plan

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "plan_small.yaml"
SMALL = ROOT / "tests" / "data" / "small"


@pytest.fixture(scope="module")
def small_ctx():
    """The search context of the small example (its week synthesized, seed 1)."""
    from planner.app import files as inputs
    from planner.optimizer.config import OptimizeConfig
    from planner.optimizer.search_context import search_context
    from planner.schemas import load_cluster, load_models, load_slo

    cl = load_cluster(SMALL / "cluster.yaml")
    ms = load_models(SMALL / "models.yaml")
    sl = load_slo(SMALL / "slo.yaml")
    trace = inputs.workload(SMALL / "workload.yaml", ms, 1)
    return search_context(cl, ms, sl, trace, OptimizeConfig(), None, True)


def _perfs(point, ctx):
    from planner.optimizer.sim.perfs import perfs_for_point

    return perfs_for_point(point, ctx.cluster, ctx.models, None)


def test_a_hop_that_changes_tiers_and_awake_hours_restarts_nothing(small_ctx):
    """Before: `hop` took a change of awake hours for a new process, so a hop between a
    schedule variant and its all-awake twin counted every instance as a restart."""
    scheduled = load_plan(GOLDEN).point("balanced")
    assert any(i.awake_hours for i in scheduled.instances)
    awake = scheduled.model_copy(
        update={
            "instances": [
                i.model_copy(update={"tier": "gpu", "awake_hours": []}) for i in scheduled.instances
            ],
            "idle_sleep_s": None,
        }
    )
    perfs = _perfs(awake, small_ctx)
    h = hop(scheduled, awake, perfs)
    assert (h.restarts, h.wakes, h.restart_s, h.moved_gib) == (0, len(awake.instances), 0, 0)
    assert placement_key(scheduled) == placement_key(awake)


def test_a_hop_that_moves_models_records_restart_seconds_and_gib():
    plan = load_plan(GOLDEN)
    h = plan.hops[plan.selected]["max-quality"]
    assert h.restarts > 0 and h.restart_s > 0 and h.moved_gib > 0
    assert h.cost_s >= h.restart_s


def test_plans_written_before_load_with_their_hops():
    """Hops without the new fields (plans written before) still load, as zeros."""
    old = {"restarts": 3, "wakes": 1, "sleeps": 0, "cost_s": 90.5}
    plan = Plan.model_validate(
        {
            "selected": "a",
            "points": [{"name": "a"}, {"name": "b"}],
            "hops": {"a": {"b": old}},
        }
    )
    assert plan.hops["a"]["b"] == Hop(restarts=3, wakes=1, cost_s=90.5)


def test_rungs_share_the_base_placement_and_fit(small_ctx):
    """Every rung is a variant of the base's placement: a hop between any two restarts
    nothing, and each satisfies the memory invariant."""
    from planner.optimizer.invariants import memory_violations

    base = load_plan(GOLDEN).point("balanced")
    perfs = _perfs(base, small_ctx)
    rungs = rung_points(small_ctx, base, perfs)
    assert len(rungs) >= 3  # all awake, schedules, steps between
    assert len({tiers_key(r) for r in [base, *rungs]}) == len(rungs) + 1
    for r in rungs:
        assert placement_key(r) == placement_key(base)
        assert not memory_violations(
            r,
            small_ctx.cluster,
            gpu_margin=small_ctx.cfg.gpu_memory_margin,
            host_margin=small_ctx.cfg.host_memory_margin,
        )
        Plan(selected=r.name, points=[r])  # valid as written (no gpu-tier awake hours)
        assert hop(base, r, perfs).restarts == 0 and hop(r, base, perfs).restarts == 0


def _m(switch_s: float, gib: float, attainment: float = 0.99) -> PointMetrics:
    return PointMetrics(
        slo_attainment=attainment, switch_p95_s=switch_s, ttft_p95_s=1.0, warm_gpu_gib=gib
    )


def test_a_point_off_the_ladder_stays_only_where_it_pays_for_its_restarts():
    """Against a rung as good as it, a point on another placement must save, held for a
    day, more warm GiB-hours than its restart seconds there and back at the price."""
    plan = load_plan(GOLDEN)
    rung, other = plan.point("balanced"), plan.point("max-quality")
    from planner.optimizer.sim.perfs import perfs_for_point
    from planner.schemas import load_cluster, load_models

    cl, ms = load_cluster(SMALL / "cluster.yaml"), load_models(SMALL / "models.yaml")
    rp, op = perfs_for_point(rung, cl, ms, None), perfs_for_point(other, cl, ms, None)
    restart_s = hop(rung, other, op).restart_s + hop(other, rung, rp).restart_s
    price = 0.25
    need_gib = price * restart_s / 24
    rungs = [(rung, _m(0.5, 50.0), 0.99, rp)]
    assert not pays(other, _m(0.5, 50.0 - 0.9 * need_gib), 0.99, op, rungs, price)
    assert pays(other, _m(0.5, 50.0 - 1.1 * need_gib), 0.99, op, rungs, price)
    # faster than every rung, or holding the SLO clearly better: offers what the ladder cannot
    assert pays(other, _m(0.1, 60.0), 0.99, op, rungs, price)
    assert pays(other, _m(0.5, 60.0), 0.999, op, [(rung, _m(0.5, 50.0), 0.98, rp)], price)


def test_thin_keeps_the_ends_and_the_base():
    items = list(range(9))
    out = thin(items, float, 3)
    assert len(out) == 5 and {0, 8, 3} <= set(out)


def test_plan_show_prints_the_ladder(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(["plan", "show", str(GOLDEN)], capsys)
    assert code == 0
    assert "the ladder from balanced" in out
    assert "2 restart(s)" in out and "GiB loaded" in out
    assert "quiet-50 (at 50% traffic)" in out
    code, out, _ = run_cli(["plan", "show", str(GOLDEN), "--json"], capsys)
    rows = {r["point"]: r for r in json.loads(out)["ladder"]}
    assert rows["balanced"]["rung"] and rows["balanced"]["hop"] is None
    assert not rows["max-quality"]["rung"] and rows["max-quality"]["hop"]["restarts"] == 2
    # the quiet rung (issue 41): marked with its share, a hop to it restarts nothing
    assert rows["quiet-50"]["for_traffic_share"] == 0.5 and rows["quiet-50"]["rung"]
    assert rows["balanced"]["for_traffic_share"] is None


def test_the_written_points_are_rungs_or_pay_for_their_restarts():
    """The small example's plan (what `optimize` writes: test_optimize checks it is the
    golden one): each point shares the selected point's placement or saves, against every
    rung as good as it, more than its restarts there and back cost. Before, its `lean`
    point moved all three models for 1.7 GiB less than `fast-switch` (3 restarts each way)."""
    from planner.optimizer.config import OptimizeConfig
    from planner.optimizer.sim.perfs import perfs_for_point
    from planner.schemas import load_cluster, load_models

    plan = load_plan(GOLDEN)
    cl, ms = load_cluster(SMALL / "cluster.yaml"), load_models(SMALL / "models.yaml")
    sel = plan.point()
    perfs = {p.name: perfs_for_point(p, cl, ms, None) for p in plan.points}

    def metrics(p):
        pr = p.predicted
        m = _m(pr.switch_p95_s, pr.warm_gpu_gib, pr.slo_attainment)
        return replace(m, quality_cost=pr.quality_cost)

    rungs = [p for p in plan.points if p is sel or plan.hops[sel.name][p.name].restarts == 0]
    judged = [(r, metrics(r), r.predicted.slo_attainment, perfs[r.name]) for r in rungs]
    price = OptimizeConfig().restart_price_gib_h
    for p in plan.points:
        if p in rungs:
            assert all(plan.hops[r.name][p.name].restarts == 0 for r in rungs if r is not p)
            continue
        m = metrics(p)
        assert pays(p, m, m.slo_attainment, perfs[p.name], judged, price), p.name


def test_each_held_back_day_is_judged_by_the_twin_target():
    """Issue 41 item 6: on each held-back day apart a point must switch at most half as long
    as its twin, or both under 0.5 s (the bench's target). Before, each day was held to the
    third asked of the days' sum, which a quiet day of a handful of waits decided by chance:
    lab16's lean rungs (0.47 s against the twin's 1.42 s on the quiet Sunday) were left out."""
    from planner.optimizer import scoring

    def day(sw: float, twin_sw: float, att: float = 0.99, twin_att: float = 0.99):
        return (
            PointMetrics(slo_attainment=att, switch_p95_s=sw),
            PointMetrics(slo_attainment=twin_att, switch_p95_s=twin_sw),
        )

    assert scoring.beats_twin_each_day([day(0.6, 1.42)])  # under half, over a third
    assert scoring.beats_twin_each_day([day(0.3, 0.45)])  # both under 0.5 s
    assert not scoring.beats_twin_each_day([day(0.8, 1.42)])
    assert not scoring.beats_twin_each_day([day(0.3, 0.45, att=0.97)])  # attainment too


def test_quiet_rungs_are_judged_on_whole_sessions_and_share_the_placement(small_ctx):
    """Issue 41 (the falling week saved 0%: no rung leaner than the selected one met the
    targets at the fitted traffic): the quiet rungs' candidates are variants of the ladder's
    placement, one of them with no awake hours at all, judged on the chosen days thinned to
    a share of their sessions, whole and the same on every run."""
    from planner.optimizer.ladder import awake_gib_h, quiet_points, thinned

    days = small_ctx.fit
    keys = set(zip(days["user"], days["session"], strict=True))
    part = thinned(days, 0.25)
    kept = set(zip(part["user"], part["session"], strict=True))
    assert kept < keys and abs(len(kept) - 0.25 * len(keys)) <= 1
    whole = days[[k in kept for k in zip(days["user"], days["session"], strict=True)]]
    assert len(part) == len(whole)  # every request of a kept session stays
    assert part.equals(thinned(days, 0.25))
    base = load_plan(GOLDEN).point("balanced")
    perfs = _perfs(base, small_ctx)
    cands = quiet_points(small_ctx, base, perfs, 0.25)
    assert len({tiers_key(c) for c in cands}) == len(cands)
    # only schedules fitted to the fallen traffic, leanest first (what bounds the step's
    # cost: the search stops at the first batch that holds); the full-traffic rung
    # variants are the ladder's business
    full = {tiers_key(p) for p in rung_points(small_ctx, base, perfs)}
    assert not full & {tiers_key(c) for c in cands}
    gib_h = [awake_gib_h(c) for c in cands]
    assert gib_h == sorted(gib_h) and gib_h[0] < awake_gib_h(base)
    assert any(all(not i.awake_hours for i in c.instances) for c in cands)
    for c in cands:
        assert placement_key(c) == placement_key(base)
        assert hop(base, c, perfs).restarts == 0
