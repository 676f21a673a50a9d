"""Bayesian outer search around the placement MILP (in the spirit of BOUTE, MLSys'26).

The MILP sees memory, capacity and a linear estimate of switch delay. What it cannot see
linearly — how much headroom to buy, the KV budget, the batch cap, how to weigh switch delay
against warm memory, which models may sleep — is searched by a Gaussian-process optimizer
(scikit-optimize). Every candidate plan is replayed through the simulator; all evaluated plans
are kept, and the Pareto set (switch P95 vs warm GiB, among plans meeting the attainment
target) becomes the plan's points (see `select` for how they are chosen: held-back days,
`lru@` twins, baselines, tier variants).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import pandas as pd

from planner.forkmap import JobMap, serial_map
from planner.optimizer import schedule, scoring
from planner.optimizer.advice import check_placeable
from planner.optimizer.build import build_point
from planner.optimizer.candidates import Knobs, enumerate_candidates, gpu_groups, gpu_sets
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.evaluation import Evaluation, SearchResult, predicted
from planner.optimizer.milp import MilpInput, MilpResult, solve
from planner.optimizer.perf import Calib
from planner.optimizer.perf.types import InstancePerf
from planner.optimizer.point_metrics import PointMetrics
from planner.optimizer.quality import stand_in_quality_cost, with_variant_quality
from planner.optimizer.scoring import Scorer
from planner.optimizer.search_context import Job, loosest_knobs, search_context
from planner.optimizer.sim.request import Requests
from planner.optimizer.sim.simulator import simulate
from planner.optimizer.space import better, knobs_from_vector, knobs_vector, search_space
from planner.schemas.cluster import Cluster
from planner.schemas.models import Models
from planner.schemas.plan import Point
from planner.schemas.slo import Slo

Progress = Callable[[int, int, PointMetrics | None], None]


def _no_clock() -> float:
    return 0.0


@dataclass(frozen=True)
class SearchInputs:
    """What one optimize run searches: the inputs, the settings, and how it runs.

    Without `scorer` the simulator scores on the trace less its held-back days
    (`cfg.validate_days`); a given `scorer` defines the scoring trace and nothing is held back.
    `clock` is injected (the core reads no clock itself): it times the MILP and the simulator.
    `job_map` runs the batches of plan variants (e.g. over forked processes: `fork_map`).
    """

    cluster: Cluster
    models: Models
    slo: Slo
    trace: pd.DataFrame
    cfg: OptimizeConfig
    scorer: Scorer | None = None
    calib: dict[str, Calib] | None = None
    clock: Callable[[], float] = _no_clock
    job_map: JobMap = serial_map


class Searcher:
    """Holds the inputs of one optimize run; `run()` does the search."""

    def __init__(self, inputs: SearchInputs):
        cluster = inputs.cluster
        models = inputs.models
        slo = inputs.slo
        cfg = inputs.cfg
        scorer = inputs.scorer
        self.clock = inputs.clock
        self.job_map = inputs.job_map
        # A given scorer defines the scoring trace itself: nothing is held back then.
        self.ctx = c = search_context(
            cluster, models, slo, inputs.trace, cfg, inputs.calib, scorer is None
        )
        self.cluster = cluster
        self.models = models
        self.slo = slo
        self.cfg = cfg
        names = models.names
        self.scorer = scorer or scoring.scorer(c.fit_req, slo, names)
        self.held_scorer = (
            scoring.scorer(c.held_req, slo, names) if c.held_req is not None else None
        )
        self._twins: dict[int, PointMetrics] = {}
        self._twin_days: dict[int, list[tuple[PointMetrics, PointMetrics]]] = {}
        # `run`'s progress callback and its total: the front's later evaluations (select.py)
        # report through it too, so the total shown ends equal to the evaluations made
        self._progress: Progress | None = None
        self._total = 0
        self.sets = tuple(gpu_sets(cluster, cfg.max_tp))
        self.gpu_usable = {
            (n.name, d): g.spec.memory_gib * (1 - cfg.gpu_memory_margin)
            for n in cluster.nodes
            for d, g in n.gpu_list()
        }
        self.gpu_groups = gpu_groups(cluster)
        self.node_ram = {
            n.name: n.cpu_memory_gib * (1 - cfg.host_memory_margin) for n in cluster.nodes
        }
        self.quality_weight = quality_weight(cfg, slo)
        self._cands: dict[tuple[float, int], tuple] = {}
        self.total_gpu_gib = sum(self.gpu_usable.values()) or 1.0

    def candidates(self, knobs: Knobs):
        """Candidates for the knobs that change them (cached)."""
        key = (round(knobs.kv_factor, 3), knobs.max_num_seqs)
        if key not in self._cands:
            self._cands[key] = tuple(
                enumerate_candidates(
                    self.cluster,
                    self.models,
                    self.slo,
                    self.ctx.demand,
                    knobs,
                    max_tp=self.cfg.max_tp,
                    max_model_len_cap=self.cfg.max_model_len,
                    gpu_margin=self.cfg.gpu_memory_margin,
                    calib=self.ctx.calib,
                )
            )
        return self._cands[key]

    def milp_input(self, knobs: Knobs) -> MilpInput:
        """The MILP for one knob setting."""
        return MilpInput(
            candidates=self.candidates(knobs),
            sets=self.sets,
            demand=self.ctx.demand,
            models=tuple(self.models.names),
            gpu_usable_gib=self.gpu_usable,
            gpu_groups=self.gpu_groups,
            node_ram_gib=self.node_ram,
            headroom=knobs.headroom,
            max_replicas=self.cfg.max_replicas,
            may_sleep=knobs.may_sleep,
            w_switch=knobs.w_switch,
            w_memory=knobs.w_memory,
            w_quality=knobs.w_quality,
            w_gpus=knobs.w_gpus,
            pins={m.name: (m.pin.node, m.pin.gpu_type) for m in self.models.models if m.pin},
        )

    def evaluate(self, index: int, knobs: Knobs) -> Evaluation:
        """MILP -> point -> simulator."""
        t0 = self.clock()
        res = solve(
            self.milp_input(knobs),
            time_limit_s=self.cfg.milp_time_limit_s,
            max_nodes=self.cfg.milp_max_nodes,
            solver=self.cfg.solver,
            gap_rel=self.cfg.milp_gap,
        )
        t1 = self.clock()
        if res.status == "infeasible":
            return Evaluation(index, knobs, res, None, {}, None, milp_s=t1 - t0)
        args = {m.name: m.engine_args for m in self.models.models if m.engine_args}
        point, perfs = build_point(f"eval-{index}", res.placements, self.models.names, args)
        ev = self.evaluate_point(index, knobs, point, perfs, res)
        ev.milp_s = t1 - t0
        return ev

    def evaluate_point(
        self,
        index: int,
        knobs: Knobs,
        point: Point,
        perfs: dict[str, InstancePerf],
        milp: MilpResult | None = None,
        origin: str = "milp",
    ) -> Evaluation:
        """Score a point on the fitted days (and the held-back ones), with its GPUs' capacity
        and the models' substitute rules set on it."""
        point.gpu_usable_gib = schedule.gpu_usable_gib(
            point, self.cluster, self.cfg.gpu_memory_margin
        )
        point.substitutes = dict(self.ctx.substitutes)
        t1 = self.clock()
        metrics = with_variant_quality(self.scorer(point, perfs), point, self.models)
        held = self.held_scorer(point, perfs) if self.held_scorer else None
        held = with_variant_quality(held, point, self.models) if held is not None else None
        t2 = self.clock()
        point.predicted = predicted(held if held is not None else metrics)
        return Evaluation(
            index, knobs, milp, point, perfs, metrics, sim_s=t2 - t1, held=held, origin=origin
        )

    def evaluate_points(self, start: int, jobs: list[Job]) -> list[Evaluation]:
        """`evaluate_point` of each (knobs, point, perfs, origin), indexed from `start`, as
        one batch through `job_map` (same figures however it runs them)."""

        def job(k: int) -> Evaluation:
            knobs, point, perfs, origin = jobs[k]
            return self.evaluate_point(start + k, knobs, point, perfs, origin=origin)

        done = self.job_map(job, len(jobs))
        if jobs:
            self.evaluated(start + len(jobs))
        return done

    def evaluated(self, n: int) -> None:
        """Tell `run`'s progress callback that `n` evaluations are made (select's too)."""
        if self._progress is not None:
            self._total = max(self._total, n)
            self._progress(n, self._total, None)

    def twin_days(self, ev: Evaluation) -> list[tuple[PointMetrics, PointMetrics]]:
        """(the point's, its `lru@` twin's) figures on each held-back day simulated apart, the
        twin matched to the point's memory on that day (none when fewer than two are held
        back or the twin is the point itself)."""
        self.run_twins([ev])
        return self._twin_days.get(ev.index, [])

    def twin_metrics(self, ev: Evaluation) -> PointMetrics:
        """The `lru@` twin of an evaluated point, on the days points are chosen on (cached)."""
        self.run_twins([ev])
        return self._twins[ev.index]

    def run_twins(self, evs: list[Evaluation]) -> None:
        """Simulate the `lru@` twins of `evs` not cached yet, as one batch."""
        todo: list[Evaluation] = []
        for ev in evs:
            if ev.index in self._twins or any(t.index == ev.index for t in todo):
                continue
            if all(i.tier == "gpu" for i in ev.point.instances):
                # Its budget holds every instance awake, as the point does: the same run.
                self._twins[ev.index] = ev.chosen
            else:
                todo.append(ev)
        req = self.ctx.chosen_req
        days = self.ctx.held_day_req if len(self.ctx.held_day_req) > 1 else []
        margins = {
            "gpu_margin": self.cfg.gpu_memory_margin,
            "host_margin": self.cfg.host_memory_margin,
        }

        def job(k: int) -> tuple[PointMetrics, list[tuple[PointMetrics, PointMetrics]]]:
            p = todo[k].point
            perfs = todo[k].perfs
            names = self.models.names
            warm = todo[k].chosen.warm_gpu_gib
            whole = scoring.twin_result(
                p, perfs, warm, self.cluster, self.slo, req, names, **margins
            )
            by_day = scoring.twins_by_day(p, perfs, self.cluster, self.slo, days, names, **margins)
            return whole.point_metrics(), by_day

        for ev, (m, pairs) in zip(todo, self.job_map(job, len(todo)), strict=True):
            self._twins[ev.index] = with_variant_quality(m, ev.point, self.models)
            self._twin_days[ev.index] = pairs

    def score_on(
        self, req: Requests, jobs: list[tuple[Point, dict[str, InstancePerf]]]
    ) -> list[PointMetrics]:
        """The metrics of each (point, perfs) on `req`, as one batch (the quiet rungs: another
        traffic than the days points are chosen on)."""

        def job(k: int) -> PointMetrics:
            p, perfs = jobs[k]
            r = simulate(p, perfs, req, self.slo, model_names=self.models.names)
            return with_variant_quality(r.point_metrics(), p, self.models)

        return self.job_map(job, len(jobs))

    def twin_on(
        self, req: Requests, point: Point, perfs: dict[str, InstancePerf], warm_gib: float
    ) -> PointMetrics:
        """The `lru@` twin of `point` on `req` at `warm_gib` (its own warm GiB there)."""
        if all(i.tier == "gpu" for i in point.instances):
            return self.score_on(req, [(point, perfs)])[0]  # the same run (`run_twins`)
        tw = scoring.twin_result(
            point,
            perfs,
            warm_gib,
            self.cluster,
            self.slo,
            req,
            self.models.names,
            gpu_margin=self.cfg.gpu_memory_margin,
            host_margin=self.cfg.host_memory_margin,
        )
        return with_variant_quality(tw.point_metrics(), point, self.models)

    def scalar(self, ev: Evaluation, lam: float) -> float:
        """What the GP minimizes: normalized switch P95 + lam x warm share + SLO shortfall
        + weighted quality cost of stand-ins (`quality_weight`; the variants' is the MILP's)."""
        if not ev.feasible:
            return 10.0
        m = ev.metrics
        switch_n = m.switch_p95_s / 30.0  # s, against a 30 s reference wake
        warm_n = m.warm_gpu_gib / self.total_gpu_gib
        short = max(0.0, self.slo.attainment - m.slo_attainment)
        quality = self.quality_weight * stand_in_quality_cost(m)
        return switch_n + lam * warm_n + 20.0 * short + quality

    def run(self, progress: Progress | None = None) -> SearchResult:
        """The whole search; deterministic for a seed."""
        check_placeable(self.ctx, self.candidates(loosest_knobs(self.cfg)))
        cfg = self.cfg
        n_models = len(self.models.names)
        # Deterministic anchors span the trade-off before the GP takes over: everything awake
        # (roomy, then tight KV), half the models allowed to sleep, all of them.
        anchors = [
            [1.5, 1.0, 32, 0.0, -2.0, 0],
            [1.7, 0.5, 16, 0.0, 0.0, 0],
            [1.7, 0.5, 16, -1.0, 0.5, n_models // 2],
            [1.7, 0.5, 16, -1.0, 1.0, n_models - 1],
        ]
        lams = (0.3, 1.0, 3.0)  # trade-offs the three GP phases favour
        total = max(cfg.evals, len(anchors))
        self._progress, self._total = progress, total
        # The last quarter refines the leanest plan that meets the SLO by letting one more
        # model sleep at a time: it fills the front where the switch/memory trade-off bites.
        n_refine = min(n_models - 1, (total - len(anchors)) // 4)
        per_phase = max(1, math.ceil(max(0, total - len(anchors) - n_refine) / len(lams)))
        rec = _Record(self, total, progress)
        # the anchors do not depend on each other: one batch
        first = [knobs_from_vector(v, self.ctx.sleep_order) for v in anchors[:total]]
        for ev in self.job_map(lambda k: self.evaluate(k, first[k]), len(first)):
            rec.add(ev)
        for phase, lam in enumerate(lams):
            if len(rec.evals) >= total - n_refine:
                break
            self._gp_phase(rec, phase, lam, per_phase, total - n_refine)
        self._refine(rec, n_refine)
        if progress and len(rec.evals) != total:  # stopped early: the total is what was made
            progress(len(rec.evals), len(rec.evals), rec.best)
        self._total = len(rec.evals)
        return self.finish(rec.evals)

    def _gp_phase(self, rec: _Record, phase: int, lam: float, steps: int, until: int) -> None:
        """One GP phase favouring trade-off `lam`: up to `steps` asks, while fewer than
        `until` evaluations are made."""
        from skopt import Optimizer
        from skopt.utils import cook_estimator

        cfg = self.cfg
        space = search_space(cfg, len(self.models.names))
        # With a few dozen points a fitted kernel is poorly determined and its L-BFGS fit
        # dominated the search's time: keep skopt's Matern kernel at unit length scales on
        # the normalized space. Sampling the acquisition keeps each ask cheap too; one
        # batched tell of everything seen so far informs the new phase.
        gp = cook_estimator("GP", space=space, random_state=cfg.seed, n_restarts_optimizer=0)
        gp.set_params(optimizer=None)
        opt = Optimizer(
            space,
            base_estimator=gp,
            acq_func="EI",
            acq_optimizer="sampling",
            acq_optimizer_kwargs={"n_points": 2000},
            n_initial_points=max(2, steps // 2),
            random_state=cfg.seed * 7919 + phase,
        )
        opt.tell(
            [knobs_vector(ev.knobs) for ev in rec.evals],
            [self.scalar(ev, lam) for ev in rec.evals],
        )
        for _ in range(steps):
            if len(rec.evals) >= until:
                break
            v = opt.ask()
            ev = rec.step(knobs_from_vector(v, self.ctx.sleep_order))
            opt.tell(v, self.scalar(ev, lam))

    def _refine(self, rec: _Record, n_refine: int) -> None:
        """Let one more model sleep at a time from the leanest plan that meets the SLO."""
        target = self.slo.attainment
        meeting = [e for e in rec.evals if e.feasible and e.metrics.slo_attainment >= target]
        if not meeting:
            return
        base = min(meeting, key=lambda e: (e.metrics.warm_gpu_gib, e.index)).knobs
        start, order = len(base.may_sleep), self.ctx.sleep_order
        for k in range(1, n_refine + 1):
            if start + k > len(self.models.names) or len(rec.evals) >= rec.total:
                break
            ev = rec.step(
                replace(
                    base,
                    may_sleep=frozenset(order[: start + k]),
                    w_switch=min(base.w_switch, 0.1),
                    w_memory=max(base.w_memory, 3.0),
                )
            )
            if ev.feasible and ev.metrics.slo_attainment < target - 0.05:
                break  # more sleepers only add switches from here

    def finish(self, evals: list[Evaluation]) -> SearchResult:
        """Pareto set, names, selected point, twins, baselines, hops and notes."""
        from planner.optimizer.select import select_points

        return select_points(self.ctx, self, evals)


class _Record:
    """A search's evaluations so far, the best one, and its progress line."""

    def __init__(self, searcher: Searcher, total: int, progress: Progress | None):
        self.searcher = searcher
        self.total = total
        self.progress = progress
        self.evals: list[Evaluation] = []
        self.best: PointMetrics | None = None

    def add(self, ev: Evaluation) -> Evaluation:
        self.evals.append(ev)
        self.best = better(self.best, ev, self.searcher.slo.attainment)
        if self.progress:
            self.progress(len(self.evals), self.total, self.best)
        return ev

    def step(self, knobs: Knobs) -> Evaluation:
        """Evaluate `knobs` as the next evaluation."""
        return self.add(self.searcher.evaluate(len(self.evals), knobs))


DEFAULT_QUALITY_WEIGHT = 10.0  # a quality cost of 0.1 counts as 30 s of switch P95


def quality_weight(cfg: OptimizeConfig, slo: Slo) -> float:
    """The objective's weight of quality cost: given, else 1 / the SLO's max_quality_cost
    (reaching the limit counts as 30 s of switch P95), else DEFAULT_QUALITY_WEIGHT."""
    if cfg.quality_weight is not None:
        return cfg.quality_weight
    if slo.max_quality_cost:
        return 1.0 / slo.max_quality_cost
    return DEFAULT_QUALITY_WEIGHT


def optimize(inputs: SearchInputs, progress: Progress | None = None) -> SearchResult:
    """Search the plans for `inputs`; see the module docstring and `SearchInputs`."""
    return Searcher(inputs).run(progress)
