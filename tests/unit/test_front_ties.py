"""The plan's front (`select._front`): attainment differences under `ATTAINMENT_TIE` count as
none, and a point leaves the front only for one that stays on it."""

from __future__ import annotations

from planner.optimizer.evaluation import Evaluation
from planner.optimizer.select import ATTAINMENT_TIE, _front


def _ev(index: int, warm_gib: float, attainment: float) -> Evaluation:
    metrics = {
        "switch_p95_s": 0.0, "warm_gpu_gib": warm_gib, "slo_attainment": attainment,
        "requests": 1000,
    }  # fmt: skip
    return Evaluation(index=index, knobs=None, milp=None, point=None, perfs={}, metrics=metrics)


def test_a_tie_chain_keeps_the_point_clearly_better_than_the_leanest():
    step = 0.8 * ATTAINMENT_TIE  # each point within a tie of the next, two steps are not
    a, b, c = _ev(0, 100.0, 0.95), _ev(1, 105.0, 0.95 + step), _ev(2, 110.0, 0.95 + 2 * step)
    top = _ev(3, 120.0, 0.97)
    front = {e.index for e in _front([a, b, c, top])}
    # b is a tie of a with more memory: out. c is a tie of b only, and b is out: c stays.
    assert front == {0, 2, 3}
