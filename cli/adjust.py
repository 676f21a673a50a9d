"""`planner adjust`: hop between the plan's Pareto points as the traffic drifts.

Modes: live (`--once`, the default, or `--every 1h`: one `adjuster.live.tick` on the
gateway's request log, journaled, applied under the state lease; another apply running:
exit 3, naming it), `--replay TRACE` (the same tick, window by window, on a trace:
adjuster/replay.py) and `--print-cron` (a crontab line and systemd units for `--once`).
This module parses and prints; cli/adjust_inputs.py loads the files.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import (
    BackendOpt,
    JsonOpt,
    PlanClusterOpt,
    PlanModelsOpt,
    PlanSloOpt,
    StateDirOpt,
    console,
    err_console,
    print_error,
    print_json,
)
from planner.errors import InputError


def register(app: typer.Typer) -> None:
    """Add `adjust`."""
    app.command("adjust")(adjust_cmd)


def adjust_cmd(
    plan_path: Annotated[Path, typer.Option("--plan", help="plan.yaml from `planner optimize`.")],
    state_dir: StateDirOpt = None,
    window: Annotated[
        str, typer.Option("--window", help="Decision window: 30m, 1h, 1d ...")
    ] = "1h",
    once: Annotated[
        bool, typer.Option("--once", help="Decide on the last window once and exit (default).")
    ] = False,
    every: Annotated[
        str | None, typer.Option("--every", help="Loop: decide every 1h (SIGTERM stops it).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Decide and print; apply and re-optimize nothing.")
    ] = False,
    reoptimize: Annotated[
        str,
        typer.Option("--reoptimize", help="When no point meets the SLO: auto | suggest | never."),
    ] = "suggest",
    replay_trace: Annotated[
        Path | None,
        typer.Option("--replay", help="Replay this trace (or synth spec .yaml) instead."),
    ] = None,
    print_cron: Annotated[
        bool, typer.Option("--print-cron", help="Print a crontab line and systemd units.")
    ] = False,
    replan: Annotated[
        bool,
        typer.Option(
            "--replan",
            help="Nightly: optimize again on the last --replan-days of the request log and "
            "write the plan, the point in force kept and selected (the old plan: .prev.yaml).",
        ),
    ] = False,
    replan_days: Annotated[
        float, typer.Option("--replan-days", min=0.04, max=28, help="Days a re-plan reads.")
    ] = 1.0,
    min_dwell: Annotated[
        str | None, typer.Option("--min-dwell", help="Least time between hops (default 2h).")
    ] = None,
    margin: Annotated[
        float | None, typer.Option("--margin", min=0, help="Share of J a better point must win by.")
    ] = None,
    confirm: Annotated[
        int | None, typer.Option("--confirm", min=1, help="Windows a change must last (default 2).")
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            metavar="KEY=VALUE",
            help="Any policy setting as KEY=VALUE (repeatable): the fields of "
            "AdjustConfig, e.g. min_gain_s=0.1 forecast_windows=2.",
        ),
    ] = None,
    start_point: Annotated[
        str | None, typer.Option("--start-point", help="Replay: point in force at the start.")
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Replay: draw traffic per model, the point in force, warm GiB and switch P95 "
            "by hour (.png).",
        ),
    ] = None,
    cluster: PlanClusterOpt = None,
    models: PlanModelsOpt = None,
    slo: PlanSloOpt = None,
    backend: BackendOpt = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds to wait for each server.")
    ] = 300.0,
    json_out: JsonOpt = False,
) -> None:
    """Detect drift in the request log, hop to a better Pareto point, or re-optimize."""
    if sum([once, every is not None, replay_trace is not None, print_cron, replan]) > 1:
        raise InputError(
            "choose one of --once, --every, --replay, --print-cron, --replan", path="--once"
        )
    from planner.cli import adjust_inputs

    cfg = adjust_inputs.policy_config(window, reoptimize, min_dwell, margin, confirm, policy or [])
    every_s = adjust_inputs.duration_s(every, "--every") if every is not None else None
    if print_cron:
        text = adjust_inputs.cron_text(plan_path, state_dir, window)
        console.print(text, highlight=False, markup=False, soft_wrap=True)
        return
    inp = adjust_inputs.load(plan_path, cluster, models, slo)
    if replay_trace is not None:
        _replay(inp, replay_trace, cfg, start_point, json_out, plot)
        return
    if plot is not None:
        raise InputError("--plot draws a replay", path="--plot", fix="add --replay TRACE")
    if replan:
        _replan(inp, plan_path, state_dir, replan_days, json_out)
        return
    from planner.app.apply_checks import placed

    # a hop starts servers where `planner apply` put this state dir's (its --port-base)
    inp.plan, _ = placed(inp.plan, inp.cluster, None, state_dir, str(plan_path))
    _live(inp, state_dir, cfg, backend, timeout, dry_run, json_out, every_s)


def _replay(
    inp, trace_path: Path, cfg, start_point: str | None, json_out: bool, plot: Path | None
) -> None:
    from planner.adjuster.replay import replay
    from planner.app.reoptimize import Reoptimizer
    from planner.app.replay_plot import check_plot_name, draw_replay
    from planner.cli import inputs as cin

    check_plot_name(plot)
    names = [p.name for p in inp.plan.points]
    if start_point is not None and start_point not in names:
        raise InputError(
            f"no point {start_point!r} in the plan", path="--start-point", fix=f"use one of {names}"
        )
    trace = cin.workload(trace_path, inp.models, inp.seed())
    reopt = Reoptimizer(inp, cfg.reoptimize_evals) if cfg.reoptimize == "auto" else None
    kw = dict(start_point=start_point, reoptimizer=reopt)
    from planner.cli.tables import REPLAY_SCORING, metrics_table

    if json_out:
        # nothing but JSON on stdout: a re-optimization's solver prints its banner there
        with cin.quiet_c_stdout():
            out = replay(inp.plan, trace, inp.slo, inp.all_perfs(), cfg, **kw)
        if plot is not None:
            draw_replay(plot, out, f"replay of {trace_path.name}")
        print_json({**out, "scoring": REPLAY_SCORING})
        return
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("replay (windows)", total=None)
        out = replay(
            inp.plan, trace, inp.slo, inp.all_perfs(), cfg,
            progress=lambda k, n: bar.update(task, completed=k, total=n), **kw,
        )  # fmt: skip
    if plot is not None:
        draw_replay(plot, out, f"replay of {trace_path.name}")
        console.print(f"wrote {plot}", highlight=False, markup=False)
    console.print(
        metrics_table(
            f"replay of {trace_path.name}: {out['windows']} windows of {cfg.window_s:.0f} s",
            {"adjusted": out["adjusted"]},
            {f"static {k}": v for k, v in out["static"].items()},
            attainment=inp.slo.attainment,
            note=REPLAY_SCORING,
        )
    )
    for h in out["hops"]:
        how = "sleeps/wakes" if h["tiers_only"] else f"{h['restarts']} restart(s)"
        console.print(
            f"hop at {h['at_s'] / 3600:8.1f} h: {h['from']} -> {h['to']} [{how}] ({h['reason']})",
            highlight=False, markup=False,
        )  # fmt: skip
    for a in out["actions"]:
        console.print(
            f"{a['kind']:10} at {a['at_s'] / 3600:8.1f} h: {a['reason']}", highlight=False
        )
    console.print(
        f"{len(out['hops'])} hop(s) ({out['tiers_only_hops']} sleep/wake only), at most "
        f"{out['max_hops_per_day']} a day; {len(out['reoptimizations'])} re-optimization(s); "
        f"final point {out['final_point']}"
    )


def _replan(inp, plan_path: Path, state_dir, days: float, json_out: bool) -> None:
    """The nightly re-plan (app/replan.py), under the state lease."""
    import contextlib

    from planner.adjuster.state import StateStore, existing_state_dir
    from planner.app.replan import replan
    from planner.cli.inputs import quiet_c_stdout, silence_solver_banner

    silence_solver_banner()
    with StateStore(existing_state_dir(state_dir)) as store, store.lease(purpose="replan"):
        err_console.print(f"adjust: re-planning {plan_path} on the last {days:g} days ...")
        with quiet_c_stdout() if json_out else contextlib.nullcontext():
            done = replan(inp, store, time.time(), days, store.dir / "replan-window.csv")
    if json_out:
        print_json(done)
        return
    console.print(
        f"wrote {done['plan']} ({len(done['points'])} points on {done['requests']} requests; "
        f"selected {done['selected']}, the point in force {done['in_force']}); the old plan: "
        f"{done['previous']}",
        highlight=False,
        markup=False,
    )


def _live(inp, state_dir, cfg, backend, timeout, dry_run, json_out, every_s) -> None:
    """One tick (`--once`), or one every `every_s` until SIGTERM/SIGINT (`--every`)."""
    import contextlib
    import signal
    import threading

    from planner.adjuster.gateway.requestlog import RequestLogSource
    from planner.adjuster.live import tick
    from planner.adjuster.state import StateStore, existing_state_dir
    from planner.cli import adjust_inputs
    from planner.cli.adjust_show import show_tick
    from planner.cli.common import open_backend, state_backend
    from planner.cli.inputs import quiet_c_stdout
    from planner.errors import PlannerError

    state_dir = existing_state_dir(state_dir)  # a decision needs a point applied there
    starts = None if dry_run else "`planner adjust` (a hop starts engines)"
    kind = state_backend(backend, state_dir)
    kinds = {inst.engine.kind for p in inp.plan.points for inst in p.instances}
    be = open_backend(kind, inp.cluster, starts_engines=starts, engines=kinds)  # before a tick
    stop = threading.Event()
    old = {}
    if every_s is not None:
        old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            t0 = time.monotonic()
            try:
                with StateStore(state_dir) as store:
                    # the point in force is the one desired state: another plan applied
                    # since adjust started is the plan adjusted from now on
                    inp, note = adjust_inputs.follow_point_in_force(inp, store.meta(), store.dir)
                    if note:
                        err_console.print(
                            f"adjust: {note}", highlight=False, markup=False, soft_wrap=True
                        )
                        store.journal("adjust", "", "", "plan changed", note)
                    tcfg = adjust_inputs.tick_config(
                        inp, cfg, state_dir=store.dir, dry_run=dry_run, timeout_s=timeout
                    )
                    # nothing but JSON on stdout: a re-optimization's solver prints there
                    with quiet_c_stdout() if json_out else contextlib.nullcontext():
                        now = time.time()
                        res = tick(now, RequestLogSource(store.dir), be, store, inp.plan, tcfg)
                    if note:
                        res.report["plan_changed"] = note
                show_tick(res, dry_run, json_out, str(store.dir))
                if res.error is not None and every_s is None:
                    raise typer.Exit(res.error.exit_code)
            except PlannerError as e:
                if every_s is None:
                    raise
                print_error(str(e))
            if every_s is None or stop.wait(max(0.0, every_s - (time.monotonic() - t0))):
                break
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if every_s is not None:
        err_console.print("adjust: stopped")
