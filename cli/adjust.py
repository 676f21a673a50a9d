"""`planner adjust`: hop between the plan's Pareto points as the traffic drifts.

Three modes:
- live (`--once`, the default, or `--every 1h`): read the last window of the gateway's
  request log, decide (adjuster/policy.py), journal the decision with its reasons in the
  state dir (`adjust_decisions` table, and one line in the apply journal), and apply the
  chosen point under the apply lease (another apply running: exit 3, naming it);
- `--replay TRACE`: walk a trace window by window (adjuster/replay.py) and print the hops
  and the metrics with and without adjusting;
- `--print-cron`: a crontab line and a systemd service + timer that run `--once` hourly.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import JsonOpt, console, err_console, print_json
from planner.errors import InputError

_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(text: str, flag: str) -> float:
    """'90s', '30m', '1h', '2d' or plain seconds -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise InputError(
            f"not a duration: {text!r}", path=flag, fix="write e.g. 30m, 1h, 2d or seconds"
        )
    return float(m.group(1)) * _UNITS_S[m.group(2) or "s"]


def register(app: typer.Typer) -> None:
    """Add `adjust`."""
    app.command("adjust")(adjust_cmd)


def adjust_cmd(
    plan_path: Annotated[Path, typer.Option("--plan", help="plan.yaml from `planner optimize`.")],
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir", help="State dir of apply/gateway; default $XDG_STATE_HOME/planner."
        ),
    ] = None,
    window: Annotated[
        str, typer.Option("--window", help="Decision window: 30m, 1h, 1d ...")
    ] = "1h",
    once: Annotated[
        bool, typer.Option("--once", help="Decide on the last window once and exit (default).")
    ] = False,
    every: Annotated[
        str | None,
        typer.Option("--every", help="Loop: decide every 1h (SIGTERM stops it cleanly)."),
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
        typer.Option(
            "--replay", help="Replay this trace (or synth spec .yaml) instead of going live."
        ),
    ] = None,
    print_cron: Annotated[
        bool,
        typer.Option("--print-cron", help="Print a crontab line and systemd units, then exit."),
    ] = False,
    min_dwell: Annotated[
        str | None, typer.Option("--min-dwell", help="Least time between hops (default 2h).")
    ] = None,
    margin: Annotated[
        float | None,
        typer.Option("--margin", min=0, help="Share of the objective a better point must win by."),
    ] = None,
    confirm: Annotated[
        int | None,
        typer.Option(
            "--confirm", min=1, help="Consecutive windows a change must last (default 2)."
        ),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            help="Any other policy setting as KEY=VALUE (repeatable): the fields of "
            "AdjustConfig, e.g. min_gain_s=0.1 hop_cost_weight=0.02 forecast_windows=2.",
        ),
    ] = None,
    start_point: Annotated[
        str | None,
        typer.Option(
            "--start-point", help="Replay: point in force at the start; default selected."
        ),
    ] = None,
    cluster: Annotated[
        Path | None, typer.Option("--cluster", help="cluster.yaml; default plan.inputs.cluster.")
    ] = None,
    models: Annotated[
        Path | None, typer.Option("--models", help="models.yaml; default plan.inputs.models.")
    ] = None,
    slo: Annotated[
        Path | None, typer.Option("--slo", help="slo.yaml; default plan.inputs.slo.")
    ] = None,
    backend: Annotated[
        str, typer.Option("--backend", help="local | ray (as `planner apply`).")
    ] = "local",
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=1, help="Seconds to wait for each server when applying."),
    ] = 300.0,
    json_out: JsonOpt = False,
) -> None:
    """Detect drift in the request log, hop to a better Pareto point, or re-optimize."""
    from planner.adjuster.policy import AdjustConfig

    if reoptimize not in ("auto", "suggest", "never"):
        raise InputError(
            f"unknown mode {reoptimize!r}", path="--reoptimize", fix="use auto, suggest or never"
        )
    if sum([once, every is not None, replay_trace is not None, print_cron]) > 1:
        raise InputError("choose one of --once, --every, --replay, --print-cron", path="--once")
    w = duration_s(window, "--window")
    kw: dict[str, Any] = {"window_s": w, "reoptimize": reoptimize}
    if min_dwell is not None:
        kw["min_dwell_s"] = (
            duration_s(min_dwell, "--min-dwell") if min_dwell.strip() not in ("0", "0s") else 0.0
        )
    if margin is not None:
        kw["margin"] = margin
    if confirm is not None:
        kw["confirm_windows"] = confirm
    fields = AdjustConfig.model_fields
    for item in policy or []:
        key, eq, value = item.partition("=")
        if not eq or key not in fields:
            raise InputError(
                f"--policy {item!r}: expected KEY=VALUE with KEY one of the policy settings",
                path="--policy",
                fix="use one of: " + ", ".join(sorted(fields)),
            )
        kw[key] = value
    try:
        cfg = AdjustConfig(**kw)
    except ValueError as e:
        raise InputError(str(e).splitlines()[-1], path="--policy / --window") from None
    if print_cron:
        _print_cron(plan_path, state_dir, window)
        return
    if replay_trace is not None:
        _replay(plan_path, replay_trace, cfg, cluster, models, slo, start_point, json_out)
        return
    if every is None:
        out = _live_once(plan_path, state_dir, cfg, cluster, models, slo, backend, timeout, dry_run)
        _show(out, json_out)
        if out.get("error_exit"):
            raise typer.Exit(out["error_exit"])
        return
    _loop(
        duration_s(every, "--every"),
        plan_path,
        state_dir,
        cfg,
        cluster,
        models,
        slo,
        backend,
        timeout,
        dry_run,
        json_out,
    )


# ------------------------------------------------------------------------------ inputs


def _inputs(plan_path: Path, cluster: Path | None, models: Path | None, slo: Path | None):
    from planner.cli.apply import _input_path, load_plan_inputs
    from planner.schemas import load_slo

    plan, cl, ms, models_file = load_plan_inputs(plan_path, cluster, models)
    if cl is None:
        raise InputError(
            "the cluster file recorded in plan.inputs.cluster is not found",
            file=str(plan_path),
            path="inputs.cluster.path",
            fix="pass --cluster CLUSTER.yaml",
        )
    sp = slo or _input_path(plan_path, plan.inputs["slo"].path if "slo" in plan.inputs else "")
    if sp is None:
        raise InputError(
            "the SLO file recorded in plan.inputs.slo is not found",
            file=str(plan_path),
            path="inputs.slo.path",
            fix="pass --slo SLO.yaml",
        )
    return plan, cl, ms, models_file, load_slo(sp), sp


def _perfs(plan, cl, ms) -> dict[str, dict[str, Any]]:
    from planner.optimizer.sim.perfs import perfs_for_point

    return {p.name: perfs_for_point(p, cl, ms) for p in plan.points}


# ------------------------------------------------------------------------------ replay


def _replay(plan_path, trace_path, cfg, cluster, models, slo, start_point, json_out) -> None:
    from planner.adjuster.replay import replay
    from planner.cli import inputs as inp

    plan, cl, ms, _, sl, _ = _inputs(plan_path, cluster, models, slo)
    if start_point is not None and start_point not in [p.name for p in plan.points]:
        raise InputError(
            f"no point {start_point!r} in the plan",
            path="--start-point",
            fix=f"use one of {[p.name for p in plan.points]}",
        )
    trace = inp.workload(trace_path, ms, int(plan.search.get("seed", 0)))
    perfs = _perfs(plan, cl, ms)
    reopt = _replay_reoptimizer(plan, cl, ms, sl, cfg) if cfg.reoptimize == "auto" else None
    from planner.cli.tables import REPLAY_SCORING, metrics_table

    if json_out:
        out = replay(plan, trace, sl, perfs, cfg, start_point=start_point, reoptimizer=reopt)
        print_json({**out, "scoring": REPLAY_SCORING})
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]replay"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} windows"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=None)
        out = replay(
            plan,
            trace,
            sl,
            perfs,
            cfg,
            start_point=start_point,
            progress=lambda k, n: bar.update(task, completed=k, total=n),
            reoptimizer=reopt,
        )
    console.print(
        metrics_table(
            f"replay of {trace_path.name}: {out['windows']} windows of {cfg.window_s:.0f} s",
            {"adjusted": out["adjusted"]},
            {f"static {k}": v for k, v in out["static"].items()},
            attainment=sl.attainment,
            note=REPLAY_SCORING,
        )
    )
    for h in out["hops"]:
        console.print(
            f"hop at {h['at_s'] / 3600:8.1f} h: {h['from']} -> {h['to']}  ({h['reason']})",
            highlight=False,
        )
    for a in out["actions"]:
        console.print(
            f"{a['kind']:10} at {a['at_s'] / 3600:8.1f} h: {a['reason']}", highlight=False
        )
    console.print(
        f"{len(out['hops'])} hop(s), at most {out['max_hops_per_day']} a day; final point {out['final_point']}"
    )


def _replay_reoptimizer(plan, cl, ms, sl, cfg):
    """`--reoptimize auto` in a replay: optimize on the recent traffic (plan's seed, fewer evals)."""
    from planner.cli import inputs as inp
    from planner.optimizer.config import OptimizeConfig
    from planner.optimizer.search import optimize

    ocfg = OptimizeConfig(evals=cfg.reoptimize_evals, seed=int(plan.search.get("seed", 0)))
    inp.silence_solver_banner()

    def reoptimize(window):
        res = optimize(cl, ms, sl, window, ocfg, inp.scorer(window, sl))
        return res.points, _perfs(res, cl, ms)

    return reoptimize


# ------------------------------------------------------------------------------ live


def _suggest_paths(plan_path: Path, state_dir: Path, now: float) -> tuple[Path, Path]:
    window_file = state_dir / f"adjust-window-{int(now)}.csv"
    new_plan = plan_path.with_name(f"{plan_path.stem.removesuffix('.plan')}.reoptimized.plan.yaml")
    return window_file, new_plan


def _optimize_command(
    plan, plan_path, cl_path, ms_path, slo_path, window_file, new_plan, evals
) -> str:
    import shlex

    seed = int(plan.search.get("seed", 0))
    args = [
        "planner",
        "optimize",
        "--cluster",
        str(cl_path),
        "--models",
        str(ms_path),
        "--slo",
        str(slo_path),
        "--workload",
        str(window_file),
        "-o",
        str(new_plan),
        "--seed",
        str(seed),
        "--evals",
        str(evals),
    ]
    return " ".join(shlex.quote(a) for a in args)


def _live_once(
    plan_path, state_dir, cfg, cluster, models, slo, backend, timeout, dry_run
) -> dict[str, Any]:
    from planner.adjuster.decisions import DecisionLog, read_window
    from planner.adjuster.policy import AdjustState, decide, observe
    from planner.adjuster.state import StateStore
    from planner.cli.apply import _device, _input_path, make_backend
    from planner.io import sha256_file
    from planner.optimizer.sim.simulator import simulate

    plan, cl, ms, models_file, sl, slo_path = _inputs(plan_path, cluster, models, slo)
    cl_path = cluster or _input_path(plan_path, plan.inputs["cluster"].path)
    plan_sha = sha256_file(plan_path)
    perfs = _perfs(plan, cl, ms)
    now = time.time()
    with StateStore(state_dir) as store:
        sdir = store.dir
        window_file, new_plan = _suggest_paths(plan_path, sdir, now)
        meta = store.meta()
        lease = None if dry_run else store.lease(purpose="adjust", ttl_s=max(600.0, 4 * timeout))
        if lease is not None:
            lease.__enter__()  # LockHeldError (exit 3) names the holder
        try:
            with DecisionLog(sdir) as log:
                st = log.last_state(plan_sha)
                applied = meta.get("point") if meta.get("plan_sha") == plan_sha else None
                if st is None:
                    since = float(meta["applied_at"]) if applied and meta.get("applied_at") else now
                    st = AdjustState(point=applied or plan.selected, since_s=since, config=cfg)
                elif applied and applied != st.point:  # someone applied another point by hand
                    st = st.model_copy(
                        update={"point": applied, "since_s": float(meta.get("applied_at") or now)}
                    )
                st = st.model_copy(update={"config": cfg})
                win = read_window(sdir, now, cfg.window_s)
                ahead_s = cfg.forecast_windows * cfg.window_s  # the next windows, a day earlier
                fc = read_window(sdir, now - 86400.0 + ahead_s, ahead_s) if ahead_s else None

                def scorer(point, df):
                    return simulate(
                        point, perfs[point.name], df, sl, sleep_after_idle_s=cfg.sleep_after_idle_s
                    ).to_metrics()

                sleep_ok = bool(
                    getattr(make_backend(backend, cl, _device(cl)), "supports_sleep", True)
                )
                cmd = _optimize_command(
                    plan,
                    plan_path,
                    cl_path,
                    models_file,
                    slo_path,
                    window_file,
                    new_plan,
                    cfg.reoptimize_evals,
                )
                obs = observe(
                    plan,
                    st,
                    win,
                    now,
                    scorer,
                    perfs,
                    sl.attainment,
                    sleep_supported=sleep_ok,
                    suggest_command=cmd,
                    # an empty day-old window may be a log without history: no look-ahead
                    forecast=fc if fc is not None and len(fc) else None,
                )
                new_st, actions = decide(st, obs)
                act = actions[0]
                out: dict[str, Any] = {
                    "decision": act.to_json(),
                    "dry_run": dry_run,
                    "state_dir": str(sdir),
                    "window": {"start_s": now - cfg.window_s, "end_s": now, "requests": len(win)},
                    "apply": None,
                    "new_plan": None,
                }
                if act.kind in ("suggest", "reoptimize"):
                    from planner.trace import write_trace

                    write_trace(win, window_file)
                if not dry_run and act.kind == "hop":
                    res = _apply(
                        plan, act.point, store, backend, cl, ms, models_file, plan_sha, timeout
                    )
                    out["apply"] = res.to_json()
                    if res.error is not None:
                        new_st = st  # the hop did not happen: stay where we are
                        out["error_exit"] = res.error.exit_code
                        out["error"] = str(res.error)
                if not dry_run and act.kind == "reoptimize":
                    from planner.errors import PlannerError

                    try:
                        out["new_plan"] = str(
                            _reoptimize(
                                plan, cl, ms, sl, win, cfg, new_plan, plan_path, cl_path,
                                models_file, slo_path, window_file,
                            )
                        )  # fmt: skip
                    except PlannerError as e:  # journaled below; the exit code says it failed
                        out["error_exit"] = e.exit_code
                        out["error"] = f"re-optimization failed: {e}"
                seq = log.record(now, plan_sha, new_st, act, dry_run=dry_run)
                out["decision"]["seq"] = seq
                if not dry_run:
                    store.journal(
                        "adjust", "", "", act.kind, f"{act.from_point} -> {act.point}: {act.reason}"
                    )
        finally:
            if lease is not None:
                lease.__exit__(None, None, None)
    return out


def _apply(plan, point, store, backend, cl, ms, models_file, plan_sha, timeout):
    from planner.adjuster.apply import apply_point, model_path_resolver
    from planner.cli.apply import _device, gpu_capacity, make_backend

    be = make_backend(backend, cl, _device(cl))
    return apply_point(
        plan, point, backend=be, state=store, timeout_s=timeout, plan_sha=plan_sha,
        model_path_resolver=model_path_resolver(ms, models_file.parent), gpu_capacity_gib=gpu_capacity(cl),
    )  # fmt: skip


def _reoptimize(
    plan, cl, ms, sl, win, cfg, new_plan, plan_path, cl_path, models_file, slo_path, window_file
) -> Path:
    """Optimize again on the window (same inputs and seed, fewer evaluations); write atomically."""
    from planner.cli import inputs as inp
    from planner.optimizer.config import OptimizeConfig
    from planner.optimizer.search import knobs_to_dict, optimize
    from planner.optimizer.workload.characterize import summarize
    from planner.planfile import write_plan
    from planner.schemas.plan import Plan

    seed = int(plan.search.get("seed", 0))
    ocfg = OptimizeConfig(evals=cfg.reoptimize_evals, seed=seed)
    inp.silence_solver_banner()
    result = optimize(cl, ms, sl, win, ocfg, inp.scorer(win, sl))
    new = Plan(
        inputs=inp.provenance(
            cluster=cl_path, models=models_file, slo=slo_path, workload=window_file
        ),
        workload_summary=summarize(win),
        search={
            "seed": seed,
            "evals": ocfg.evals,
            "solver": ocfg.solver,
            "reoptimized_from": str(plan_path),
            "knobs": {n: knobs_to_dict(k) for n, k in result.knobs.items()},
        },
        selected=result.selected,
        points=result.points,
    )
    write_plan(new_plan, new, cl)
    return new_plan


def _show(out: dict[str, Any], json_out: bool) -> None:
    if json_out:
        print_json({k: v for k, v in out.items() if k != "error_exit"})
        return
    d = out["decision"]
    tag = " (dry run)" if out["dry_run"] else ""
    console.print(
        f"window: {out['window']['requests']} requests; decision{tag}: [bold]{d['kind']}[/] "
        f"{d['from']} -> {d['point']}: {d['reason']}",
        highlight=False,
    )
    from rich.table import Table

    t = Table(title="points on the window")
    for c in (
        "point",
        "SLO met",
        "switch P95 s",
        "warm GiB",
        "objective s",
        "meets",
        "hop: starts/stops",
    ):
        t.add_column(c)
    for name, m in d["reasons"].get("points", {}).items():
        hc = m.get("hop_cost") or {}
        t.add_row(
            name,
            f"{m['slo_attainment']:.1%}",
            f"{m['switch_p95_s']:.2f}",
            f"{m['warm_gpu_gib']:.1f}",
            f"{m['objective_s']:.2f}",
            "yes" if m["meets_slo"] else "no",
            f"{hc.get('starts', 0)}/{hc.get('stops', 0)}",
        )
    console.print(t)
    for key in ("drift_plan", "drift_chosen"):
        rep = d["reasons"].get(key)
        if rep:
            console.print(f"{key}: {rep['verdict']} {', '.join(rep['fired'])}", highlight=False)
    if d["kind"] == "suggest":
        console.print(f"run: {d['command']}", highlight=False, soft_wrap=True)
    if out.get("new_plan"):
        console.print(
            f"wrote {out['new_plan']}; apply it with `planner apply {out['new_plan']}`",
            highlight=False,
        )
    if out.get("error"):
        err_console.print(f"[bold red]error:[/] {out['error']}", highlight=False, soft_wrap=True)


def _loop(
    every_s, plan_path, state_dir, cfg, cluster, models, slo, backend, timeout, dry_run, json_out
) -> None:
    """Decide every `every_s` until SIGTERM/SIGINT; a failed round is reported, the loop goes on."""
    import signal
    import threading

    from planner.errors import PlannerError

    stop = threading.Event()
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                _show(
                    _live_once(
                        plan_path, state_dir, cfg, cluster, models, slo, backend, timeout, dry_run
                    ),
                    json_out,
                )
            except PlannerError as e:
                err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
            stop.wait(max(0.0, every_s - (time.monotonic() - t0)))
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    err_console.print("adjust: stopped")


# ------------------------------------------------------------------------------ cron


def _print_cron(plan_path: Path, state_dir: Path | None, window: str) -> None:
    import shlex
    import shutil
    import sys

    from planner.adjuster.state import default_state_dir

    exe = shutil.which("planner") or f"{sys.executable} -m planner.cli.main"
    sdir = (state_dir or default_state_dir()).resolve()
    cmd = (
        f"{exe} adjust --plan {shlex.quote(str(plan_path.resolve()))} --state-dir {shlex.quote(str(sdir))} "
        f"--window {shlex.quote(window)} --once"
    )
    log = sdir / "adjust.log"
    console.print(
        f"""# crontab -e: decide five minutes past every hour (the apply lease keeps it off a running apply)
5 * * * * {cmd} >> {shlex.quote(str(log))} 2>&1

# /etc/systemd/system/planner-adjust.service
[Unit]
Description=planner adjust: hop between Pareto points when the traffic drifts
After=network-online.target

[Service]
Type=oneshot
ExecStart={cmd}

# /etc/systemd/system/planner-adjust.timer
[Unit]
Description=Run planner adjust hourly

[Timer]
OnCalendar=*-*-* *:05:00
Persistent=true

[Install]
WantedBy=timers.target
# enable with: systemctl daemon-reload && systemctl enable --now planner-adjust.timer""",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
