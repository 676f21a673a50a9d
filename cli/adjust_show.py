"""How `planner adjust` shows a live tick, a replay and a re-plan (cli/adjust.py parses,
`planner.app.adjust` runs them, this prints)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.cli.common import console, print_error, print_json

if TYPE_CHECKING:
    from planner.adjuster.policy_types import AdjustConfig
    from planner.app.adjust import WindowProgress
    from planner.schemas.slo import Slo


def show_tick(res, dry_run: bool, json_out: bool, state_dir: str) -> None:
    """One tick's result: JSON, or the decision, the points on the window and what was done."""
    out = {**res.to_json(), "dry_run": dry_run, "state_dir": state_dir}
    if json_out:
        print_json(out)
        return
    d = out["decision"]
    tag = " (dry run)" if dry_run else ""
    console.print(
        f"window: {out['window']['requests']} requests; decision{tag}: [bold]{d['kind']}[/] "
        f"{d['from']} -> {d['point']}: {d['reason']}",
        highlight=False,
    )
    from rich.table import Table

    t = Table(title="points on the window")
    for c in ("point", "SLO met", "switch P95 s", "warm GiB", "objective s", "meets", "hop"):
        t.add_column(c)
    for name, m in d["reasons"].get("points", {}).items():
        hc = m.get("hop_cost") or {}
        hop = (
            "-"
            if not hc.get("duration_s")
            else (f"{hc['starts']} start(s), {hc['wakes']} wake(s), {hc['duration_s']:.0f} s")
        )
        t.add_row(
            name,
            f"{m['slo_attainment']:.1%}",
            f"{m['switch_p95_s']:.2f}",
            f"{m['warm_gpu_gib']:.1f}",
            f"{m['objective_s']:.2f}",
            "yes" if m["meets_slo"] else "no",
            hop,
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
        print_error(str(out["error"]))


def show_replay(
    out: dict[str, Any],
    trace_path: Path,
    cfg: AdjustConfig,
    slo: Slo,
    json_out: bool,
    plot: Path | None,
) -> None:
    """A replay: JSON, or its metrics beside the static points', its hops and actions; with
    `plot`, the picture of its series."""
    from planner.app.replay_plot import draw_replay
    from planner.cli.tables import REPLAY_SCORING, metrics_table

    if plot is not None:
        draw_replay(plot, out, f"replay of {trace_path.name}")
    if json_out:
        print_json({**out, "scoring": REPLAY_SCORING})
        return
    if plot is not None:
        console.print(f"wrote {plot}", highlight=False, markup=False)
    console.print(
        metrics_table(
            f"replay of {trace_path.name}: {out['windows']} windows of {cfg.window_s:.0f} s",
            {"adjusted": out["adjusted"]},
            {f"static {k}": v for k, v in out["static"].items()},
            attainment=slo.attainment,
            note=REPLAY_SCORING,
        )
    )
    for h in out["hops"]:
        how = "sleeps/wakes" if h["tiers_only"] else f"{h['restarts']} restart(s)"
        console.print(
            f"hop at {h['at_s'] / 3600:8.1f} h: {h['from']} -> {h['to']} [{how}] ({h['reason']})",
            highlight=False,
            markup=False,
        )
    for a in out["actions"]:
        console.print(
            f"{a['kind']:10} at {a['at_s'] / 3600:8.1f} h: {a['reason']}", highlight=False
        )
    console.print(
        f"{len(out['hops'])} hop(s) ({out['tiers_only_hops']} sleep/wake only), at most "
        f"{out['max_hops_per_day']} a day; {len(out['reoptimizations'])} re-optimization(s); "
        f"final point {out['final_point']}"
    )


def show_replan(done: dict[str, Any], json_out: bool) -> None:
    """What the nightly re-plan wrote."""
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


@contextmanager
def replay_bar() -> Iterator[WindowProgress]:
    """A progress bar over a replay's windows."""
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("replay (windows)", total=None)
        yield lambda k, n: bar.update(task, completed=k, total=n)
