"""One tick of `planner adjust`: a window of requests -> an observation -> a decision -> its effects.

`tick(now_s, log, backend, store, plan, config)` is the only code that does this; live
(`--once`, `--every`) and replay (adjuster/replay.py) both call it, on one time base: the
log's timestamps and `now_s` are in the same seconds (live: since the epoch, from the
gateway's request log; replay: the trace's), and every window is `window_at(log, end_s,
length_s)`. One tick:

1. the policy state: the last decision journaled for this plan (`adjust_decisions` in the
   state dir), else `config.start`, else the point applied from this plan (or the plan's
   selected one) in force since it was applied;
2. the window (the last `window_s`) and, once the log reaches back a day, the forecast (the
   next `forecast_windows` windows as they went a day earlier, used while the day before
   foresaw the window: `observe.foresaw`; when it did not, or there is no day of history, the
   last `forecast_windows` windows stand for the traffic a hop is judged on: hopcost.py);
3. every point of the plan simulated on both (`simulate`, the optimizer's scorer), the
   Observation (`observe.observe`) and the decision (`policy.decide`);
4. its effects, unless `config.dry_run`: a hop is `apply_point` on `backend` (the real one
   live, `SimBackend` in replay) under the state lease (another apply holds it: LockHeldError,
   exit 3), and a failed apply leaves the policy where it was; `reoptimize` asks
   `config.reoptimize` (a ReoptimizePolicy) on the last `reoptimize_lookback_s` of traffic
   (live: writes a new plan file; replay: its points join the plan); `suggest`/`reoptimize` call
   `config.on_suggest` with the window (live: written next to the state for the printed
   command); the decision is journaled (the decision log, and one line in the apply journal).
   A dry run decides and journals the decision as a dry run (not a state to continue from),
   and does nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from planner.adjuster import hopcost
from planner.adjuster.apply import ApplyResult, ModelPathResolver, apply_point
from planner.adjuster.backends.base import Backend
from planner.adjuster.decisions import DecisionLog
from planner.adjuster.observe import (
    ObserveSetting,
    Simulated,
    cost_of_steps,
    foresaw,
    observe,
)
from planner.adjuster.policy import decide
from planner.adjuster.policy_types import DAY_S, AdjustConfig, AdjustState, Decision, HopCost
from planner.adjuster.reoptimize_policy import PointPerfs, ReoptimizePolicy
from planner.adjuster.state import StateStore
from planner.errors import ApplyError, PlannerError
from planner.schemas.plan import Plan
from planner.schemas.slo import Slo

if TYPE_CHECKING:
    from planner.adjuster.forecast import Forecast
    from planner.optimizer.sim.metrics import SimResult


class LogSource(Protocol):
    """Where the requests come from: the gateway's log live, a trace in replay."""

    def window(self, start_s: float, end_s: float) -> pd.DataFrame:
        """The requests that arrived in `[start_s, end_s)` (trace schema, sorted by time)."""
        ...

    def first_s(self) -> float | None:
        """When the first request arrived (None: no request yet)."""
        ...


def window_at(source: LogSource, end_s: float, length_s: float) -> pd.DataFrame:
    """The requests of the `length_s` before `end_s`, in the source's time base."""
    return source.window(end_s - length_s, end_s)


class TraceSource:
    """A trace in memory as a LogSource (replay, tests)."""

    def __init__(self, trace: pd.DataFrame):
        self.trace = trace
        self._ts = trace["timestamp"].to_numpy(float)

    def window(self, start_s: float, end_s: float) -> pd.DataFrame:
        lo, hi = np.searchsorted(self._ts, [start_s, end_s], side="left")
        return self.trace.iloc[int(lo) : int(hi)]

    def first_s(self) -> float | None:
        return float(self._ts[0]) if len(self._ts) else None


@dataclass
class TickConfig:
    """What a tick needs besides its arguments."""

    policy: AdjustConfig
    slo: Slo
    perfs: PointPerfs  # point name -> instance id -> InstancePerf
    plan_sha: str = ""
    plan_path: str = ""  # the plan file, resolved ("": not from a file; replay, tests)
    dry_run: bool = False
    model_names: list[str] | None = None  # the model order of the simulations
    start: AdjustState | None = None  # the policy state when the journal has none
    apply_timeout_s: float = 300.0
    model_path_resolver: ModelPathResolver = field(default=lambda inst: inst.model)
    gpu_capacity_gib: dict[tuple[str, int], float] | None = None
    suggest_command: str = ""
    on_suggest: Callable[[pd.DataFrame], None] | None = None
    reoptimize: ReoptimizePolicy | None = None


@dataclass
class TickResult:
    """What one tick saw, decided and did."""

    now_s: float
    window: pd.DataFrame
    state_before: AdjustState
    state: AdjustState  # after the decision (and its effects)
    action: Decision
    sims: dict[str, SimResult]  # point name -> SimResult on the window
    forecast_requests: tuple[int, ...]  # requests in each forecast window
    plan: Plan  # the plan after the tick (grown by a replay re-optimization)
    hop: HopCost | None = None  # the hop made: its steps, timed (None: no hop)
    apply: ApplyResult | None = None
    report: dict[str, Any] = field(default_factory=dict)  # a re-optimization's outcome
    error: PlannerError | None = None
    seq: int = 0  # the decision's number in the journal

    def to_json(self) -> dict[str, Any]:
        """The decision, the window and the effects (what `adjust --json` prints)."""
        out: dict[str, Any] = {
            "decision": {**self.action.to_json(), "seq": self.seq},
            "window": {
                "start_s": self.now_s - self.state.config.window_s,
                "end_s": self.now_s,
                "requests": len(self.window),
            },
            "forecast_window_requests": list(self.forecast_requests),
            "hop": self.hop.to_json() if self.hop is not None else None,
            "apply": self.apply.to_json() if self.apply is not None else None,
            **self.report,
        }
        if self.error is not None:
            out["error"] = str(self.error)
        return out


def tick(
    now_s: float,
    log: LogSource,
    backend: Backend,
    store: StateStore,
    plan: Plan,
    config: TickConfig,
) -> TickResult:
    """Decide on the window ending at `now_s` and carry the decision out (module docstring)."""
    cfg = config.policy
    lease = (
        contextlib.nullcontext()
        if config.dry_run
        else store.lease(purpose="adjust", ttl_s=max(600.0, 4 * config.apply_timeout_s))
    )
    with lease, DecisionLog(store.dir) as journal:
        _refuse_another_plan(store.meta(), config)
        st = _state(journal, store, plan, config, now_s).model_copy(update={"config": cfg})
        win = window_at(log, now_s, cfg.window_s)
        ahead_s = cfg.forecast_windows * cfg.window_s
        first = log.first_s()
        fc, dropped = None, False
        if ahead_s and first is not None and first <= now_s - DAY_S:  # a day of history
            fc = window_at(log, now_s - DAY_S + ahead_s, ahead_s)
            dropped = not foresaw(window_at(log, now_s - DAY_S, cfg.window_s), win, cfg)
            fc = None if dropped else fc
        sims = _simulate(plan, win, config)
        fc_sims = _simulate(plan, fc, config) if fc is not None else None
        back = window_at(log, now_s, hopcost.recent_s(cfg)) if fc is None else None
        after = hopcost.after(
            config.slo, now_s, cfg, fc, fc_sims, back, lambda df: _simulate(plan, df, config)
        )
        setting = ObserveSetting(
            config.perfs, config.slo.attainment, backend.supports_sleep, config.suggest_command
        )
        ahead = Simulated(fc, fc_sims) if fc_sims is not None else None  # None when fc is
        lean = _lean_basis(log, now_s, plan, config) if cfg.decision == "lean" else None
        obs = observe(plan, st, now_s, Simulated(win, sims), setting, ahead, dropped, after, lean)
        new_st, actions = decide(st, obs)
        act = actions[0]
        res = TickResult(now_s, win, st, new_st, act, sims, obs.forecast_window_requests, plan)
        if not config.dry_run:
            if act.kind in ("suggest", "reoptimize") and config.on_suggest is not None:
                config.on_suggest(win)
            _effects(res, log, backend, store, config)
        res.seq = journal.record(now_s, config.plan_sha, res.state, act, dry_run=config.dry_run)
        if not config.dry_run:
            store.journal(
                "adjust", "", "", act.kind, f"{act.from_point} -> {act.point}: {act.reason}"
            )
    return res


def _refuse_another_plan(meta: dict[str, str], config: TickConfig) -> None:
    """ApplyError when the point in force was applied from another plan file than this tick's:
    a hop of this plan would undo that apply (the state dir's point in force is the one
    desired state). The same file rewritten since (`adjust --replan`, an edit) is this plan:
    the re-plan keeps the point in force among its points."""
    theirs = meta.get("plan_path", "")
    if not (meta.get("plan_sha") and theirs and config.plan_path) or theirs == config.plan_path:
        return
    raise ApplyError(
        f"the point in force ({meta.get('point', '')}) was applied from {theirs}, not from "
        f"{config.plan_path}: adjusting this plan would undo that apply",
        fix=f"adjust the plan in force (--plan {theirs}), or apply {config.plan_path} again",
    )


def _state(
    journal: DecisionLog, store: StateStore, plan: Plan, config: TickConfig, now_s: float
) -> AdjustState:
    """Where the policy stands before this tick."""
    meta = store.meta()
    applied = meta.get("point") if meta.get("plan_sha") == config.plan_sha else None
    applied_at = float(meta.get("applied_at") or now_s)
    st = journal.last_state(config.plan_sha)
    if st is None:
        if config.start is not None:
            return config.start
        return AdjustState(point=applied or plan.selected, since_s=applied_at if applied else now_s)
    if applied and applied != st.point and applied in [p.name for p in plan.points]:
        # someone applied another point by hand: it is in force since then
        return st.model_copy(update={"point": applied, "since_s": applied_at})
    return st


def _lean_basis(
    log: LogSource, now_s: float, plan: Plan, config: TickConfig
) -> tuple[Forecast, Simulated, Slo]:
    """The lean decision's forecast of the next windows (adjuster/forecast.py), every point
    simulated on its traffic, and the SLO."""
    from planner.adjuster.forecast import forecast_counts, forecast_traffic

    cfg = config.policy
    back_s = (cfg.history_days + 1) * DAY_S  # the profile's days and the level's windows
    history = window_at(log, now_s, back_s)
    models = list(dict.fromkeys([i.model for p in plan.points for i in p.instances]))
    models += sorted(set(history["model"].astype(str)) - set(models))
    fc = forecast_counts(history, log.first_s(), plan.workload_summary, now_s, cfg, models)
    traffic = forecast_traffic(history, fc)
    return fc, Simulated(traffic, _simulate(plan, traffic, config)), config.slo


def _simulate(plan: Plan, df: pd.DataFrame, config: TickConfig) -> dict[str, SimResult]:
    from planner.optimizer.sim.simulator import simulate

    return {
        p.name: simulate(
            p,
            config.perfs[p.name],
            df,
            config.slo,
            model_names=config.model_names,
            sleep_after_idle_s=config.policy.sleep_after_idle_s,
        )
        for p in plan.points
    }


def _effects(
    res: TickResult, log: LogSource, backend: Backend, store: StateStore, config: TickConfig
) -> None:
    """Carry out a hop or a re-optimization (the caller holds the lease)."""
    act = res.action
    if act.kind == "hop":
        before = {r.id: r.tier for r in store.instances()}
        out = apply_point(
            res.plan,
            act.point,
            backend=backend,
            state=store,
            timeout_s=config.apply_timeout_s,
            plan_sha=config.plan_sha,
            model_path_resolver=config.model_path_resolver,
            gpu_capacity_gib=config.gpu_capacity_gib,
            lease=False,
            undrain=False,  # after `planner down` a hop starts nothing
        )
        res.apply = out
        steps = [(a.action, a.instance) for a in out.actions if a.result == "ok"]
        res.hop = cost_of_steps(steps, before, config.perfs[act.point])
        if out.error is not None:
            res.state, res.error = res.state_before, out.error  # it did not happen: stay
    elif act.kind == "reoptimize" and config.reoptimize is not None:
        recent = window_at(log, res.now_s, config.policy.reoptimize_lookback_s)
        try:
            grown, res.report = config.reoptimize.reoptimize(recent, res.now_s, res.plan)
        except PlannerError as e:  # journaled; the exit code says it failed
            res.error = e
            return
        if grown is not None:
            res.plan = grown
