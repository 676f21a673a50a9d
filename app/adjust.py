"""The `adjust` service: hop between a plan's Pareto points as the traffic drifts.

`live` runs one `adjuster.live.tick` on the gateway's request log (or one every `every_s`
until SIGTERM/SIGINT), journaled and applied under the state lease; `replay` runs the same
tick window by window on a trace; `replan` is the nightly re-plan (app/replan.py). The
setup (inputs, the policy, the tick's settings) is `app/adjust_inputs.py`; the caller
renders what each returns."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.adjuster.backends.base import Backend
    from planner.adjuster.live import TickResult
    from planner.adjuster.policy_types import AdjustConfig
    from planner.app.inputs import PlanInputs

WindowProgress = Callable[[int, int], None]  # (windows done, windows in all)


@dataclass(frozen=True)
class AdjustHooks:
    """How an adjust reports as it goes: `say` a line on stderr, `busy(title)` wraps reading
    a workload (a spinner), `replaying()` wraps a replay and gives what hears its windows,
    `on_tick(result, state dir)` shows each live tick, `error` a tick's error in a loop."""

    say: Callable[[str], None] = lambda _: None
    busy: Callable[[str], AbstractContextManager[object]] = lambda _: nullcontext()
    replaying: Callable[[], AbstractContextManager[WindowProgress | None]] = nullcontext
    on_tick: Callable[[TickResult, str], None] = lambda _r, _d: None
    error: Callable[[str], None] = lambda _: None


def _quiet(json_out: bool) -> AbstractContextManager[None]:
    """Nothing but JSON on stdout: a re-optimization's solver prints its banner there."""
    from planner.app.files import quiet_c_stdout

    return quiet_c_stdout() if json_out else contextlib.nullcontext()


def replay(
    inp: PlanInputs,
    trace_path: Path,
    cfg: AdjustConfig,
    start_point: str | None,
    json_out: bool,
    hooks: AdjustHooks | None = None,
) -> dict[str, Any]:
    """The live tick replayed window by window on a trace (or synth spec): its series, hops,
    re-optimizations and actions (`adjuster.replay.replay`)."""
    from planner.adjuster.replay import replay as run
    from planner.app import files
    from planner.app.reoptimize import Reoptimizer

    hooks = hooks or AdjustHooks()
    names = [p.name for p in inp.plan.points]
    if start_point is not None and start_point not in names:
        raise InputError(
            f"no point {start_point!r} in the plan", path="--start-point", fix=f"use one of {names}"
        )
    with hooks.busy(f"reading the workload {trace_path.name} ..."):
        trace = files.workload(trace_path, inp.models, inp.seed())
    reopt = Reoptimizer(inp, cfg.reoptimize_evals) if cfg.reoptimize == "auto" else None
    with _quiet(json_out), hooks.replaying() as progress:
        return run(
            inp.plan,
            trace,
            inp.needed_slo(),
            inp.all_perfs(),
            cfg,
            start_point=start_point,
            reoptimizer=reopt,
            progress=progress,
        )


def replan(
    inp: PlanInputs,
    plan_path: Path,
    state_dir: Path | None,
    days: float,
    json_out: bool,
    hooks: AdjustHooks | None = None,
) -> dict[str, Any]:
    """The nightly re-plan (app/replan.py) on the last `days` of the request log, under the
    state lease: what it wrote."""
    from planner.adjuster.state import StateStore, existing_state_dir
    from planner.app.files import silence_solver_banner
    from planner.app.replan import replan as run

    hooks = hooks or AdjustHooks()
    silence_solver_banner()
    with StateStore(existing_state_dir(state_dir)) as store, store.lease(purpose="replan"):
        hooks.say(f"adjust: re-planning {plan_path} on the last {days:g} days ...")
        with _quiet(json_out):
            return run(inp, store, time.time(), days, store.dir / "replan-window.csv")


@dataclass(frozen=True)
class LiveRequest:
    """What a live `planner adjust` was asked (`every_s` None: one tick, `--once`)."""

    plan_path: Path
    state_dir: Path | None
    config: AdjustConfig
    backend: str | None = None
    timeout_s: float = 300.0
    dry_run: bool = False
    json_out: bool = False
    every_s: float | None = None


def live(inp: PlanInputs, req: LiveRequest, hooks: AdjustHooks | None = None) -> TickResult | None:
    """One tick (`every_s` None), or one every `every_s` until SIGTERM/SIGINT; each shown by
    `hooks.on_tick`. Returns the last tick (None: none finished). One tick raises its
    PlannerError; a loop reports it (`hooks.error`) and goes on."""
    import signal
    import threading

    from planner.app.apply_checks import placed
    from planner.app.backends import open_backend, state_backend
    from planner.errors import PlannerError

    hooks = hooks or AdjustHooks()
    # a hop starts servers where `planner apply` put this state dir's (its --port-base)
    inp.plan, _ = placed(inp.plan, inp.cluster, None, req.state_dir, str(req.plan_path))
    from planner.adjuster.state import existing_state_dir

    state_dir = existing_state_dir(req.state_dir)  # a decision needs a point applied there
    starts = None if req.dry_run else "`planner adjust` (a hop starts engines)"
    kind = state_backend(req.backend, state_dir)
    kinds = {inst.engine.kind for p in inp.plan.points for inst in p.instances}
    be = open_backend(kind, inp.cluster, starts_engines=starts, engines=kinds)  # before a tick
    stop = threading.Event()
    old = {}
    if req.every_s is not None:
        old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    res = None
    try:
        while True:
            t0 = time.monotonic()
            try:
                inp, res = _one_tick(inp, state_dir, be, req, hooks)
                if res.error is not None and req.every_s is None:
                    return res
            except PlannerError as e:
                if req.every_s is None:
                    raise
                hooks.error(str(e))
            if req.every_s is None or stop.wait(max(0.0, req.every_s - (time.monotonic() - t0))):
                break
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if req.every_s is not None:
        hooks.say("adjust: stopped")
    return res


def _one_tick(
    inp: PlanInputs, state_dir: Path, be: Backend, req: LiveRequest, hooks: AdjustHooks
) -> tuple[PlanInputs, TickResult]:
    """Follow the point in force, decide on the last window and carry it out; shown."""
    from planner.adjuster.gateway.requestlog import RequestLogSource
    from planner.adjuster.live import tick
    from planner.adjuster.state import StateStore
    from planner.app import adjust_inputs

    with StateStore(state_dir) as store:
        # the point in force is the one desired state: another plan applied
        # since adjust started is the plan adjusted from now on
        inp, note = adjust_inputs.follow_point_in_force(inp, store.meta(), store.dir)
        if note:
            hooks.say(f"adjust: {note}")
            store.journal("adjust", "", "", "plan changed", note)
        tcfg = adjust_inputs.tick_config(
            inp, req.config, state_dir=store.dir, dry_run=req.dry_run, timeout_s=req.timeout_s
        )
        with _quiet(req.json_out):
            res = tick(time.time(), RequestLogSource(store.dir), be, store, inp.plan, tcfg)
        if note:
            res.report["plan_changed"] = note
    hooks.on_tick(res, str(store.dir))
    return inp, res
