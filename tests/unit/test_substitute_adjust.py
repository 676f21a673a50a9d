"""The adjuster scores points with stand-ins on, exactly as the optimizer does (issue 17 item 5).

A point whose `substitutes` let planner-7b answer for coder-32b while coder-32b wakes: the
replay (`adjust --replay`) and the live tick (`adjust --once`, on the gateway's SQLite log)
simulate it with the same `simulate` as the optimizer's scorer (`scoring.scorer`), and so
report the same attainment, switch P95, wakes, warm GiB, substituted share and quality cost.
"""

from __future__ import annotations

import adjust_helpers as h
import pytest
from adjust_helpers import EPOCH0, write_log
from apply_fakes import FakeBackend

from planner.adjuster.gateway import RequestLogSource
from planner.adjuster.live import TickConfig, tick, window_at
from planner.adjuster.policy import AdjustConfig, AdjustState
from planner.adjuster.replay import replay
from planner.adjuster.state import StateStore
from planner.optimizer import scoring
from planner.optimizer.workload.synth import synth
from planner.schemas import load_plan
from planner.schemas.models import Substitute
from planner.schemas.plan import SubstituteRule

DAY = 86400.0
SAME = (
    "slo_attainment",
    "switch_p95_s",
    "switch_count",
    "warm_gpu_gib",
    "requests",
    "substituted_share",
    "quality_cost",
)
RULE = SubstituteRule(
    when="always_while_waking", to=[Substitute(model=h.A, variant="awq", quality_penalty=0.1)]
)


def _plan(stand_in: bool):
    """`a-hot` (planner-7b awake on GPU 0, coder-32b on the host tier of GPU 1) and `b-hot`
    (the reverse), lazy instances asleep after 10 idle minutes; with `stand_in`, planner-7b
    answers for coder-32b while coder-32b wakes."""
    p = h.plan()
    for pt in p.points:
        pt.idle_sleep_s = 600.0
        if stand_in:
            pt.substitutes = {h.B: RULE}
    return p


@pytest.fixture(scope="module")
def day():
    """One day: every role calls planner-7b, the reviewer coder-32b."""
    return synth(h.spec(1), seed=0)


def _optimizer(p, tr):
    """The optimizer's figures of each point on `tr` (its scorer)."""
    score = scoring.scorer(tr, h.slo(), [h.A, h.B])
    perfs = h.perfs(p)
    return {pt.name: score(pt, perfs[pt.name]).to_json() for pt in p.points}


def _same(got: dict, want: dict) -> None:
    for k in SAME:
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-9), k


def test_replay_scores_stand_ins_as_the_optimizer(day):
    p = _plan(stand_in=True)
    want = _optimizer(p, day)
    assert want["a-hot"]["substituted_share"] > 0  # the stand-in answered, at a cost
    assert want["a-hot"]["quality_cost"] == pytest.approx(0.1 * want["a-hot"]["substituted_share"])
    out = replay(p, day, h.slo(), h.perfs(p), AdjustConfig(window_s=DAY))  # one window
    for name, m in out["static"].items():
        _same(m, want[name])
    _same(out["adjusted"], want[p.selected])  # nothing to hop to in one window
    # without the stand-in the same point waits for its wakes instead
    off = replay(_plan(stand_in=False), day, h.slo(), h.perfs(p), AdjustConfig(window_s=DAY))
    assert off["static"]["a-hot"]["substituted_share"] == 0.0
    assert off["static"]["a-hot"]["switch_count"] == out["static"]["a-hot"]["switch_count"]
    assert off["static"]["a-hot"]["switch_p95_s"] > 0 == out["static"]["a-hot"]["switch_p95_s"]


def test_live_tick_scores_stand_ins_as_the_optimizer(tmp_path, day):
    """The plan goes through its file (the point's `substitutes` survive it), the window
    through the gateway's SQLite log."""
    p = load_plan(h.write_inputs(tmp_path, _plan(stand_in=True)))
    assert p.point("a-hot").substitutes == {h.B: RULE}
    start = 10 * 3600.0  # a working hour
    win = h.window(day, start)
    state = tmp_path / "state"
    state.mkdir()
    write_log(state, win, EPOCH0)
    src = RequestLogSource(state)
    now = EPOCH0 + start + 3600.0
    cfg = AdjustConfig()
    tcfg = TickConfig(
        policy=cfg,
        slo=h.slo(),
        perfs=h.perfs(p),
        plan_sha="live",
        model_names=[h.A, h.B],
        start=AdjustState(point=p.selected, since_s=EPOCH0, config=cfg),
        dry_run=True,
    )
    with StateStore(state) as store:
        res = tick(now, src, FakeBackend(supports_sleep=True), store, p, tcfg)
    live_win = window_at(src, now, 3600.0)
    assert len(live_win) == len(win)
    want = _optimizer(p, live_win)
    assert want["a-hot"]["substituted_share"] > 0
    for name, sim in res.sims.items():
        _same(sim.to_metrics(), want[name])
