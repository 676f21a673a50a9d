"""What `planner optimize` shows: a progress bar over the search (lines off a terminal), the
run's table (points beside their twins and the baselines), capacity shortfall, notes, and
the `--json` summary."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.cli.common import console, err_console
from planner.optimizer.point_metrics import metrics_json

if TYPE_CHECKING:
    from planner.app.optimize import Progress as OnEvaluation
    from planner.optimizer.evaluation import SearchResult
    from planner.optimizer.point_metrics import PointMetrics
    from planner.schemas.plan import Plan
    from planner.schemas.slo import Slo


@contextlib.contextmanager
def progress_bar(evals: int) -> Iterator[OnEvaluation]:
    """A progress bar over the search's evaluations (and lines, off a terminal)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]optimize"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=evals)
        lines = _ProgressLines(not console.is_terminal)

        def progress(done: int, total: int, best: PointMetrics | None) -> None:
            desc = (
                f"best: switch P95 {best.switch_p95_s:.2f} s, warm {best.warm_gpu_gib:.0f} GiB, "
                f"attainment {best.slo_attainment:.1%}"
                if best
                else lines.desc
            )
            bar.update(task, completed=done, total=total, description=desc)
            lines.update(done, total, desc)

        yield progress


def summary_json(result: SearchResult, plan: Plan, out: Path) -> dict[str, Any]:
    """The `--json` summary of a run: where the plan went, its points, twins, baselines and
    the search's figures."""
    return {
        "plan": str(out),
        "selected": plan.selected,
        "points": metrics_json(result.metrics),
        "points_fit": metrics_json(result.metrics_fit),
        "twins": {f"lru@{n}": m for n, m in metrics_json(result.twins).items()},
        "baselines": metrics_json(result.baselines),
        "notes": plan.notes,
        "capacity": result.capacity.to_json() if result.capacity else None,
        "hops": {a: {b: h.model_dump() for b, h in d.items()} for a, d in plan.hops.items()},
        "validate_days": result.validate_days,
        "held_days": [{"day": d, "requests": n} for d, n in result.held_days],
        "held_back": plan.search.get("held_back"),  # the rule that chose them
        "evaluations": len(result.evaluations),
        "feasible_evaluations": sum(e.feasible for e in result.evaluations),
        "milp_time_s": round(result.milp_time_s, 3),
        "milp_max_s": round(result.milp_max_s, 3),
        "sim_time_s": round(result.sim_time_s, 3),
    }


def print_summary(result: SearchResult, plan: Plan, out: Path, sl: Slo) -> None:
    """The run's table (points beside their twins and the baselines), capacity shortfall,
    notes and where the plan went."""
    from planner.cli.tables import metrics_table

    which = ", ".join(f"day {d} ({n} requests)" for d, n in result.held_days)
    days = (
        f"the {result.validate_days} held-back days: {which}; fitted on {result.fit_requests} "
        "requests"
        if result.validate_days
        else "the whole trace (nothing held back)"
    )
    console.print(
        metrics_table(
            f"Pareto points, each beside its lru@ twin, and baselines: simulated on {days}",
            metrics_json(result.metrics),
            metrics_json(result.baselines),
            selected=plan.selected,
            attainment=sl.attainment,
            twins=metrics_json(result.twins),
            fitted=metrics_json(result.metrics_fit) if result.validate_days else None,
        )
    )
    if result.capacity is not None and result.capacity.overloaded:
        from planner.cli.evaluate_show import capacity_table

        console.print(capacity_table(result.capacity, "demand beyond what the cluster can serve"))
    for n in result.notes:
        console.print(f"[yellow]note:[/] {n}")
    console.print(
        f"wrote [bold]{out}[/] ({len(plan.points)} points, selected [bold]{plan.selected}[/]; "
        f"{len(result.evaluations)} evaluations, MILP {result.milp_time_s:.1f} s, "
        f"simulator {result.sim_time_s:.1f} s)"
    )


class _ProgressLines:
    """Progress as plain lines on stderr when stdout is not a terminal (a pipe, a log file),
    where the bar shows nothing: the first evaluation, then at most one line every
    `every_s`, and the last one."""

    def __init__(self, on: bool, every_s: float = 10.0):
        self.on, self.every_s = on, every_s
        self.t0 = time.perf_counter()
        self.last_s = -float("inf")
        self.desc = ""

    def update(self, done: int, total: int, desc: str) -> None:
        self.desc = desc
        now = time.perf_counter()
        if not self.on or (now - self.last_s < self.every_s and done not in (1, total)):
            return
        self.last_s = now
        tail = f", {desc}" if desc else ""
        err_console.print(
            f"optimize: {done}/{total} evaluated, {now - self.t0:.0f} s{tail}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
