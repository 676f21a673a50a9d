"""Scoring a plan point on a trace: the simulator as the optimizer's scorer, the baselines
and the memory-matched `lru@POINT` twins beside it, and the held-back days.

Pure: takes the cluster, models, SLO and trace objects; the CLI, the benches and the
replay call these rather than the simulator directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from planner.errors import PlannerError
from planner.optimizer import baselines
from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.point_metrics import PointMetrics, metrics_json
from planner.optimizer.sim.metrics import SimResult
from planner.optimizer.sim.perfs import perfs_for_point
from planner.optimizer.sim.request import Requests, to_requests
from planner.optimizer.sim.simulator import simulate
from planner.schemas.cluster import Cluster
from planner.schemas.models import Models
from planner.schemas.plan import Point
from planner.schemas.slo import Slo

Scorer = Callable[[Point, dict[str, InstancePerf]], PointMetrics]
DAY_S = 86400.0
AUTO_VALIDATE_DAYS = 2  # days held back by default ...
AUTO_VALIDATE_MIN_DAYS = 5  # ... from a trace of at least this many days
TWIN_SWITCH_FACTOR = 3.0  # a point's switch P95 must be <= its twin's / this ...
TWIN_ATTAINMENT_SLACK = 0.01  # ... at attainment >= the twin's - this
# issue 41's target, out of sample and on each held-back day apart: switch P95 at most the
# twin's / TWIN_TARGET_FACTOR, or both under TWIN_BOTH_FAST_S
TWIN_TARGET_FACTOR = 2.0
TWIN_BOTH_FAST_S = 0.5
# Runs beyond the first that raise the twin's warm cap, each one more simulation of the trace
# (2 made some twins of the bundled examples stronger, lab16's balanced from 3.00 to 2.54 s
# of switch P95, and cost `planner evaluate --baseline lru-matched` a fifth more CPU time
# on the 298k-request week).
TWIN_CAP_STEPS = 1
TWIN_GIB_STEP_MIN = 0.5  # a step raises the cap by at least this, GiB
TWIN_GIB_TOL = 1e-6  # the twin's time-average warm GiB may exceed the point's by this, GiB


def requests(trace: Any, models: Models | None = None) -> Requests:
    """The trace as the simulator's arrays, model order from models.yaml (convert once)."""
    return to_requests(trace, models.names if models is not None else None)


def scorer(trace: Any, slo: Slo, model_names: list[str] | None = None) -> Scorer:
    """The simulator as the optimizer's scorer: (point, perfs) -> PointMetrics.

    The trace is converted to arrays once, so instances shared between points are
    simulated once (the simulator's per-trace memo)."""
    req = to_requests(trace, model_names)

    def score(point: Point, perfs: dict[str, InstancePerf]) -> PointMetrics:
        return simulate(point, perfs, req, slo, model_names=model_names).point_metrics()

    return score


def trace_days(trace: Any) -> int:
    """Calendar days the trace touches (timestamps count from 00:00 of its first day)."""
    t = np.asarray(trace["timestamp"], dtype=float)
    if not len(t):
        return 0
    return int(np.floor(t.max() / DAY_S) - np.floor(t.min() / DAY_S)) + 1


def validate_days(trace: Any, asked: int | None) -> int:
    """Days to hold back: `asked`, or by default 2 of a trace of 5 or more days, else 0."""
    days = trace_days(trace)
    if asked is None:
        return AUTO_VALIDATE_DAYS if days >= AUTO_VALIDATE_MIN_DAYS else 0
    return asked if asked < days else 0


def _day_index(trace: Any) -> np.ndarray:
    """Each request's calendar day, from 0 (the trace's first day)."""
    t = np.asarray(trace["timestamp"], dtype=float)
    return (np.floor(t / DAY_S) - (np.floor(t.min() / DAY_S) if len(t) else 0.0)).astype(int)


def day_counts(trace: Any) -> np.ndarray:
    """Requests on each calendar day of the trace (from its first day)."""
    return np.bincount(_day_index(trace), minlength=trace_days(trace))


def held_back_days(trace: Any, held_days: int, rule: str = "week") -> list[int]:
    """The days held back (from 0).

    `week` (the default): days that stand for the week, one of each kind in turn, the
    latest of its kind: a day is busy when it has at least the median day's requests, else
    quiet; the trace's last day is taken, then the last day of the other kind, and so on
    (two of a week that starts on Monday: Sunday and Friday, so the headline figures carry a
    working day's traffic and a weekend's, not the weekend's alone). It became the default
    with what made it hold bench/optimize_quality.py's targets: each part closed up
    (`split_days`), twins judged on each held-back day apart (`beats_twin_each_day`) and
    slow wakes awake the hour before their forecast hours (`schedule.edge_rates`).
    `last`: the trace's last `held_days` (a Monday week's weekend; the default before).
    `spread`: days ranked by their requests (ties: the earlier first), the day at each of
    the `held_days` quantiles (k + 1/2) / held_days (two of seven: the busier weekend day
    and the second busiest weekday)."""
    days = trace_days(trace)
    if held_days <= 0 or not days:
        return []
    if rule == "last":
        return list(range(max(0, days - held_days), days))
    counts = day_counts(trace)
    if rule == "week":
        busy = counts >= np.median(counts)
        picks: list[int] = []
        kind = bool(busy[days - 1])
        for _ in range(min(held_days, days)):
            left = [d for d in range(days) if d not in picks]
            same = [d for d in left if busy[d] == kind] or left
            picks.append(same[-1])
            kind = not kind
        return sorted(picks)
    ranked = sorted(range(days), key=lambda d: (counts[d], d))
    spread = {ranked[min(days - 1, int((k + 0.5) * days / held_days))] for k in range(held_days)}
    return sorted(spread)


def fit_extent(trace: Any, held: list[int]) -> tuple[int, float]:
    """(days, hours) the trace covers less the `held` days (from 0): the span the fitted
    days' per-day and per-hour rates are over (held-back days inside it do not count)."""
    fit = ~np.isin(_day_index(trace), held)
    t = np.asarray(trace["timestamp"], dtype=float)[fit]
    if not len(t):
        return 0, 0.0
    first, last = int(np.floor(t.min() / DAY_S)), int(np.floor(t.max() / DAY_S))
    base = int(np.floor(np.asarray(trace["timestamp"], dtype=float).min() / DAY_S))
    inside = sum(1 for d in held if first < d + base < last)
    return last - first + 1 - inside, (t.max() - t.min()) / 3600.0 - 24.0 * inside


def each_day(trace: Any) -> list[Any]:
    """The trace's calendar days, each apart (those with requests, in day order)."""
    day = _day_index(trace)
    return [trace[day == d].reset_index(drop=True) for d in np.unique(day)]


def split_days(trace: Any, held_days: int, rule: str = "week") -> tuple[Any, Any]:
    """(fit, held back): the `held_back_days` apart from the rest, each closed up: a day
    the other part took is left out of its timeline, not left empty (a held-back Friday
    and Sunday follow each other, the Thursday and Saturday of the fitted days too). An
    empty day inside either would count in its time averages: warm memory, and the cap
    of the `lru@` twins matched to it, which a reactive twin, holding what it woke last
    through the empty day, meets only with a lower cap on the busy ones."""
    day = _day_index(trace)
    back = held_back_days(trace, held_days, rule)
    held = np.isin(day, back)
    rest = [d for d in range(trace_days(trace)) if d not in back]

    def closed_up(part: np.ndarray, other: list[int]) -> Any:
        first = day[part].min() if part.any() else 0
        inside = [d for d in other if d > first]  # the other part's days inside this one's
        shift = np.searchsorted(inside, day[part]) * DAY_S
        out = trace[part].reset_index(drop=True)
        if len(out):
            out["timestamp"] = np.asarray(out["timestamp"], dtype=float) - shift
        return out

    return closed_up(~held, back), closed_up(held, rest)


def baselines_on(
    built: dict[str, baselines.Baseline | str],
    trace: Any,
    slo: Slo,
    models: Models,
    cluster: Cluster | None = None,
    calib: dict[str, Any] | None = None,
) -> dict[str, PointMetrics | str]:
    """Each built baseline's metrics on `trace` (why, where it could not be built)."""
    return {
        n: b
        if isinstance(b, str)
        else simulate_baseline(b, trace, slo, models, cluster, calib).point_metrics()
        for n, b in built.items()
    }


def simulate_baseline(
    b: baselines.Baseline,
    trace: Any,
    slo: Slo,
    models: Models,
    cluster: Cluster | None = None,
    calib: dict[str, Any] | None = None,
) -> SimResult:
    """A baseline through the same simulator (perfs recomputed under a calibration)."""
    perfs = b.perfs
    if calib and cluster is not None and not b.point.name.startswith("lru@"):
        perfs = perfs_for_point(b.point, cluster, models, calib)
    return simulate(b.point, perfs, trace, slo, model_names=models.names, **b.simulate_kwargs())


def build_baselines(
    cluster: Cluster, models: Models, slo: Slo, trace: Any, names: tuple[str, ...] | None = None
) -> dict[str, baselines.Baseline | str]:
    """name -> Baseline, or the reason it cannot be built (static, lru, melange)."""
    out: dict[str, baselines.Baseline | str] = {}
    for name in names or baselines.BASELINES:
        try:
            out[name] = baselines.build(name, cluster, models, slo, trace)
        except PlannerError as e:
            out[name] = e.message
    return out


def baseline_metrics(
    cluster: Cluster,
    models: Models,
    slo: Slo,
    trace: Any,
    calib: dict[str, Any] | None = None,
    built: dict[str, baselines.Baseline | str] | None = None,
) -> dict[str, dict[str, Any]]:
    """static / lru / melange metrics on `trace` as plain data (`metrics_json`: a baseline
    that cannot be built says why)."""
    built = built if built is not None else build_baselines(cluster, models, slo, trace)
    return metrics_json(baselines_on(built, trace, slo, models, cluster, calib))


def twin_result(
    point: Point,
    perfs: dict[str, InstancePerf],
    warm_gib: float,
    cluster: Cluster,
    slo: Slo,
    trace: Any,
    model_names: list[str],
    **margins: float,
) -> SimResult:
    """The twin of `point` on `trace`, as strong as its memory lets it be: LRU under a cap on
    its warm memory at every instant, raised from `warm_gib` (the point's time-average on the
    same trace) while its own time-average stays within it. The point's warm memory rises
    above its average at busy hours; a cap at the average alone would hold the twin below
    it at every instant, leaving memory unused where instances do not fill the cap. Each
    step raises the cap by the memory the twin left unused on average, or tries half the
    last step where that took the twin past the point's average (`TWIN_CAP_STEPS` runs
    beyond the first: the twin costs at most 1 + that many simulations; deterministic)."""
    b = baselines.lru_matched(point, perfs, cluster, warm_gib, **margins)

    def run(cap_gib: float) -> SimResult:
        kw = {**b.simulate_kwargs(), "warm_budget_gib": cap_gib}
        return simulate(b.point, b.perfs, trace, slo, model_names=model_names, **kw)

    cap = warm_gib
    best = run(cap)
    step = warm_gib - best.warm_gpu_gib  # GiB the twin left unused, on average
    for _ in range(TWIN_CAP_STEPS):
        if step < TWIN_GIB_STEP_MIN:
            break  # at the point's average already, or no cap holds it (a wake that cannot fit)
        r = run(cap + step)
        if r.warm_gpu_gib <= warm_gib + TWIN_GIB_TOL:
            cap, best = cap + step, r
            step = warm_gib - r.warm_gpu_gib
        else:
            step /= 2  # past the point's average: half the step
    return best


def beats_twin(m: PointMetrics, twin_m: PointMetrics) -> bool:
    """Planned tiers worth a plan: switch P95 <= 1/3 of the twin's (or no switch at all, as
    the twin) at attainment >= the twin's - 0.01 (issue 13)."""
    fast = m.switch_p95_s <= twin_m.switch_p95_s / TWIN_SWITCH_FACTOR or m.switch_p95_s == 0
    return fast and m.slo_attainment >= twin_m.slo_attainment - TWIN_ATTAINMENT_SLACK


def twins_by_day(
    point: Point,
    perfs: dict[str, InstancePerf],
    cluster: Cluster,
    slo: Slo,
    days: list[Requests],
    model_names: list[str],
    **margins: float,
) -> list[tuple[PointMetrics, PointMetrics]]:
    """(the point's, its twin's) figures on each of `days` simulated as its own trace, the
    twin matched to the point's memory on that day (`beats_twin_each_day` reads them)."""
    out = []
    for day in days:
        own = simulate(point, perfs, day, slo, model_names=model_names)
        twin = twin_result(
            point, perfs, own.warm_gpu_gib, cluster, slo, day, model_names, **margins
        )
        out.append((own.point_metrics(), twin.point_metrics()))
    return out


def beats_twin_target(m: PointMetrics, twin_m: PointMetrics) -> bool:
    """Issue 41's target: switch P95 at most half the twin's (`TWIN_TARGET_FACTOR`), or both
    under `TWIN_BOTH_FAST_S` (waits a person does not tell apart)."""
    sw, tw = m.switch_p95_s, twin_m.switch_p95_s
    return sw <= tw / TWIN_TARGET_FACTOR or (sw < TWIN_BOTH_FAST_S and tw < TWIN_BOTH_FAST_S)


def beats_twin_each_day(days: list[tuple[PointMetrics, PointMetrics]]) -> bool:
    """`beats_twin_target` at the twin's attainment - 0.01 on every day apart ((the point's,
    its twin's) figures, `twins_by_day`: each day simulated as its own trace, the twin
    matched to the point's memory on it): the held-back days stand for the week (a working
    day and a quiet one), and a point is worth its plan only where it is worth it on both.
    Judged on their sum, the busy day's requests outvote the quiet day's, and the twin's
    memory is matched to an average over both. A day holds a few hundred requests and a
    handful of waits: the sum is held to `beats_twin`'s third, each day to the target."""
    return all(
        beats_twin_target(m, t) and m.slo_attainment >= t.slo_attainment - TWIN_ATTAINMENT_SLACK
        for m, t in days
    )
