"""What `planner evaluate` prints and draws: the metrics of each point (and per model),
the points' capacity shortfalls, and a PNG of latency and warm memory over time."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from planner.cli.common import console

if TYPE_CHECKING:
    from rich.table import Table

    from planner.app.evaluate import Evaluation
    from planner.optimizer.capacity import CapacityReport
    from planner.optimizer.sim.metrics import SimResult


def capacity_table(report: CapacityReport, title: str) -> Table:
    """The capacity table: per model, peak hourly demand against capacity, hours beyond."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in (
        "model",
        "peak req/h",
        "prefill tok/s",
        "decode tok/s",
        "capacity req/h",
        "hours over",
    ):
        t.add_column(col, justify="left" if col == "model" else "right")
    for r in report.rows:
        t.add_row(
            r.model,
            f"{r.peak_requests_per_h:.0f}",
            f"{r.peak_prefill_tokens_per_s:.0f}",
            f"{r.peak_decode_tokens_per_s:.0f}",
            f"{r.capacity_requests_per_h:.0f}",
            str(len(r.hours_over)) if r.hours_over else "",
            style="red" if r.hours_over else None,
        )
    if report.hours_over_all:
        t.caption = report.lines()[-1]
    return t


def _fmt(x: float) -> str:
    from planner.cli.tables import fmt_num

    return fmt_num(x)


def _table(results: dict[str, SimResult]) -> None:
    from rich import box
    from rich.table import Table

    from planner.cli.tables import EVALUATE_SCORING, refusal_text

    first = next(iter(results.values()))
    refused = [f"{n}: {text}" for n, r in results.items() if (text := refusal_text(r.refused()))]
    t = Table(
        title="simulated on the workload (P95 latencies, s)",
        caption="\n".join([f"{first.requests} requests", *refused, EVALUATE_SCORING]),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("point", "SLO met", "TTFT", "TPOT", "switch", "wakes", "warm GiB", "GPUs", "busy"):
        t.add_column(col, justify="left" if col == "point" else "right")
    for name, r in results.items():
        m = r.to_metrics()
        t.add_row(
            name,
            f"{m['slo_attainment']:.1%}",
            _fmt(m["ttft_p95_s"]),
            _fmt(m["tpot_p95_s"]),
            _fmt(m["switch_p95_s"]),
            str(m["switch_count"]),
            f"{m['warm_gpu_gib']:.1f}",
            str(m["gpus_used"]),
            f"{r.gpu_busy_fraction:.1%}",
        )
    console.print(t)
    for name, r in results.items():
        pm = Table(
            title=f"{name}: per model (P95 latencies, s)",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
        )
        for col in ("model", "requests", "failed", "SLO met", "TTFT", "TPOT", "switch", "wakes"):
            pm.add_column(col, justify="left" if col == "model" else "right")
        per_model = r.to_metrics()["per_model"]
        why = [f"{m}: {note}" for m, v in per_model.items() if (note := refusal_text(v["refused"]))]
        pm.caption = "\n".join(why) or None
        for model, v in per_model.items():
            pm.add_row(
                model,
                str(v["requests"]),
                str(v["failed"]),
                f"{v['slo_attainment']:.1%}",
                _fmt(v["ttft_p95_s"]),
                _fmt(v["tpot_p95_s"]),
                _fmt(v["switch_p95_s"]),
                str(v["switch_count"]),
            )
        console.print(pm)


def plot(results: dict[str, SimResult], out: Path) -> None:
    """Hourly P95 TTFT and warm GPU memory over time, one line per point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for name, r in results.items():
        hours = (r.arrival_s - r.start_s) / 3600.0
        if len(hours):
            b = np.floor(hours).astype(int)
            xs, ys = [], []
            for h in np.unique(b):
                v = r.ttft_s[b == h]
                v = v[np.isfinite(v)]
                if len(v):
                    xs.append(h + 0.5)
                    ys.append(np.percentile(v, 95))
            ax1.plot(xs, ys, label=name, lw=1)
        ts, gib = r.memory_curve
        ax2.step((ts - r.start_s) / 3600.0, gib, where="post", label=name, lw=1)
    ax1.set_ylabel("TTFT P95 per hour, s")
    ax1.set_yscale("symlog", linthresh=1.0)
    ax1.legend(loc="upper right", fontsize=8)
    ax2.set_ylabel("warm GPU memory, GiB")
    ax2.set_xlabel("hours from the start of the trace")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def print_results(ev: Evaluation, plot_out: Path | None) -> None:
    """The metrics table, the points' capacity shortfalls and where the plot went."""
    _table(ev.results)
    for name, c in ev.capacity.items():
        if c.overloaded:
            console.print(capacity_table(c, f"{name}: demand beyond what the point can serve"))
        for model, why in c.slow.items():
            console.print(f"[yellow]note:[/] {name}: {model}: {why}", highlight=False)
    if plot_out is not None:
        console.print(f"plot: {plot_out}")
