"""`planner adjust`: hop between the plan's Pareto points as the traffic drifts.

Modes: live (`--once`, the default, or `--every 1h`: one `adjuster.live.tick` on the
gateway's request log, journaled, applied under the state lease; another apply running:
exit 3, naming it), `--replay TRACE` (the same tick, window by window, on a trace:
adjuster/replay.py) and `--print-cron` (a crontab line and systemd units for `--once`).
This module parses; `planner.app.adjust` runs each mode and cli/adjust_show.py prints.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.adjust_show import replay_bar, show_replan, show_replay, show_tick
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
    from planner.app import adjust as service
    from planner.app import adjust_inputs

    cfg = adjust_inputs.policy_config(window, reoptimize, min_dwell, margin, confirm, policy or [])
    every_s = adjust_inputs.duration_s(every, "--every") if every is not None else None
    if print_cron:
        text = adjust_inputs.cron_text(plan_path, state_dir, window)
        console.print(text, highlight=False, markup=False, soft_wrap=True)
        return
    inp = adjust_inputs.load(plan_path, cluster, models, slo)
    hooks = service.AdjustHooks(
        say=_say,
        busy=lambda title: err_console.status(title),
        replaying=nullcontext if json_out else replay_bar,
        on_tick=lambda res, where: show_tick(res, dry_run, json_out, where),
        error=print_error,
    )
    if replay_trace is not None:
        from planner.app.replay_plot import check_plot_name

        check_plot_name(plot)
        out = service.replay(inp, replay_trace, cfg, start_point, json_out, hooks)
        show_replay(out, replay_trace, cfg, inp.slo, json_out, plot)
        return
    if plot is not None:
        raise InputError("--plot draws a replay", path="--plot", fix="add --replay TRACE")
    if replan:
        done = service.replan(inp, plan_path, state_dir, replan_days, json_out, hooks)
        show_replan(done, json_out)
        return
    req = service.LiveRequest(
        plan_path=plan_path,
        state_dir=state_dir,
        config=cfg,
        backend=backend,
        timeout_s=timeout,
        dry_run=dry_run,
        json_out=json_out,
        every_s=every_s,
    )
    res = service.live(inp, req, hooks)
    if res is not None and res.error is not None and every_s is None:
        raise typer.Exit(res.error.exit_code)


def _say(line: str) -> None:
    err_console.print(line, highlight=False, markup=False, soft_wrap=True)
