"""How `planner workload inspect` shows a trace's characterization (tables and one figure),
and `workload drift` its verdict."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.cli.common import console

if TYPE_CHECKING:
    from planner.optimizer.workload.drift import DriftReport


def print_summary(s: dict[str, Any], path: Path) -> None:
    """The characterization of a trace as `planner workload inspect` prints it."""
    if not s.get("requests"):
        console.print(f"{path}: no requests")
        return
    dur_h = s["duration_s"] / 3600.0
    console.print(
        f"[bold]{path}[/]: {s['requests']} requests over {dur_h:.1f} h, {s['users']} users, "
        f"{s['sessions']} sessions; switch rate {s['switch']['rate']:.1%}; "
        f"peak {s['peak_hour_requests_per_s'] * 3600:.0f} requests/h"
    )
    from planner.cli.tables import Col, fit_table

    cols = [
        Col("model", "left"),
        Col("share"),
        Col("peak req/h"),
        Col("peak hour", drop=2),
        Col("input mean/p95"),
        Col("output mean/p95"),
        Col("prefix reuse", drop=1),
        Col("idle>60s arrivals/h", drop=3),
    ]
    grid = s["idle_arrivals_per_hour"]["idle_s"]
    j60 = grid.index(60) if 60 in grid else 0
    rows = []
    for m in s["models"]:
        ln, pk = s["lengths"][m], s["peak"][m]
        rows.append(
            (
                [
                    m,
                    f"{s['mix'][m]:.1%}",
                    f"{pk['requests_per_s'] * 3600:.0f}",
                    f"{pk['hour_of_day']:02d}:00",
                    f"{ln['input_mean']:.0f}/{ln['input_p50_p95'][1]:.0f}",
                    f"{ln['output_mean']:.0f}/{ln['output_p50_p95'][1]:.0f}",
                    f"{s['prefix'][m]['reuse_ratio']:.0%}",
                    f"{s['idle_arrivals_per_hour'][m][j60]:.1f}",
                ],
                None,
            )
        )
    t = fit_table("per model", cols, rows)
    console.print(t)
    g = s["gap_s_p10_p50_p90_p99"]
    console.print(
        f"inter-call gap in a session, s: p10 {g[0]:.1f}, p50 {g[1]:.1f}, p90 {g[2]:.1f}, p99 {g[3]:.1f}"
    )
    c = s["concurrency"]
    for key, label in (("models_active_cdf", "models"), ("sessions_active_cdf", "sessions")):
        cdf = c[key]
        med = next(i for i, v in enumerate(cdf) if v >= 0.5)
        p95 = next(i for i, v in enumerate(cdf) if v >= 0.95)
        console.print(
            f"{label} active at once ({c['window_s']:.0f} s windows with traffic): "
            f"median {med}, p95 {p95}, max {len(cdf) - 1}"
        )


def plot_summary(df, s: dict[str, Any], path: Path, *, title: str = "") -> None:
    """One figure: requests per model over time, switch matrix, concurrency CDFs."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from planner.io import atomic_write_bytes

    fig = plt.figure(figsize=(15, 9), constrained_layout=True)
    gs = fig.add_gridspec(2, 2, height_ratios=[1, 1.1])
    ax_rate = fig.add_subplot(gs[0, :])
    ax_sw = fig.add_subplot(gs[1, 0])
    ax_cc = fig.add_subplot(gs[1, 1])
    _plot_rates(ax_rate, df, s["models"])
    _plot_switches(fig, ax_sw, s)
    _plot_concurrency(ax_cc, s["concurrency"])
    fig.suptitle(
        f"{title}: {s['requests']} requests, {s['users']} users, {s['sessions']} sessions",
        fontsize=13,
    )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _plot_rates(ax_rate: Any, df, models: list[str]) -> None:
    """Requests per hour of each model over time, stacked."""
    import matplotlib.pyplot as plt
    import numpy as np

    ts = df["timestamp"].to_numpy(dtype=float)
    span_h = max((ts.max() - ts.min()) / 3600.0, 1e-9)
    bin_s = 3600.0 if span_h > 6 else 300.0
    edges = np.arange(np.floor(ts.min() / bin_s) * bin_s, ts.max() + bin_s, bin_s)
    cmap = plt.get_cmap("tab10")
    unit_s = 86400.0 if span_h > 48 else 3600.0
    x = edges / unit_s  # bin edges; the last value is repeated so the last bin is drawn
    # Stacked: the top edge is the team's total, each band one model's share of it.
    model_col = df["model"].to_numpy(dtype=object)
    base = np.zeros(len(edges))
    for i, m in enumerate(models):
        h, _ = np.histogram(ts[model_col == m], bins=edges)
        h = np.append(h, h[-1]) * (3600.0 / bin_s)
        top = base + h
        ax_rate.fill_between(x, base, top, step="post", color=cmap(i % 10), label=m, lw=0)
        base = top
    ax_rate.set_xlabel(
        "time since 00:00 of day 0 (days)" if span_h > 48 else "time since 00:00 of day 0 (h)"
    )
    ax_rate.set_ylabel("requests per hour (stacked)")
    ax_rate.set_title(f"Requests per model over time ({bin_s / 60:.0f} min bins)")
    ax_rate.set_xlim(x.min(), x.max())
    ax_rate.set_ylim(bottom=0)
    ax_rate.legend(loc="upper right", ncol=min(len(models), 4), fontsize=9)
    ax_rate.grid(alpha=0.3)
    if span_h > 48:
        ax_rate.set_xticks(np.arange(np.floor(x.min()), np.ceil(x.max()) + 1))


def _plot_switches(fig: Any, ax_sw: Any, s: dict[str, Any]) -> None:
    """The hand-off matrix: P(next model | previous model) within a session."""
    import numpy as np

    models = s["models"]
    counts = np.asarray(s["switch"]["counts"], float)
    rows = counts.sum(axis=1, keepdims=True)
    prob = np.divide(counts, rows, out=np.zeros_like(counts), where=rows > 0)
    im = ax_sw.imshow(prob, cmap="Blues", vmin=0, vmax=1)
    ax_sw.set_xticks(range(len(models)), models, rotation=35, ha="right", fontsize=9)
    ax_sw.set_yticks(range(len(models)), models, fontsize=9)
    ax_sw.set_xlabel("next model")
    ax_sw.set_ylabel("previous model (same session)")
    ax_sw.set_title(f"Hand-off probability (switch rate {s['switch']['rate']:.0%})")
    for (r, c), v in np.ndenumerate(prob):
        if v >= 0.005:
            ax_sw.text(
                c,
                r,
                f"{v:.2f}",
                ha="center",
                va="center",
                fontsize=8,
                color="white" if v > 0.5 else "black",
            )
    fig.colorbar(im, ax=ax_sw, label="P(next | previous)", shrink=0.85)
    if rows.sum() == 0:
        ax_sw.text(
            (len(models) - 1) / 2,
            (len(models) - 1) / 2,
            "no hand-offs:\nno session has two calls",
            ha="center",
            va="center",
            fontsize=11,
        )


def _plot_concurrency(ax_cc: Any, cc: dict[str, Any]) -> None:
    """CDFs of the models and sessions active per window with traffic."""
    import matplotlib.pyplot as plt

    win = f"{cc['window_s']:.0f} s window"
    m_cdf, s_cdf = cc["models_active_cdf"], cc["sessions_active_cdf"]
    ax_cc.step(range(len(m_cdf)), m_cdf, where="post", color="tab:blue", lw=1.8)
    # Sessions get their own (top) axis only when their scale dwarfs the models'.
    two_axes = len(s_cdf) > 3 * len(m_cdf)
    ax_s = ax_cc.twiny() if two_axes else ax_cc
    ax_s.step(range(len(s_cdf)), s_cdf, where="post", color="tab:orange", lw=1.8)
    if two_axes:
        ax_cc.set_xlabel(f"models active in a {win}", color="tab:blue")
        ax_s.set_xlabel(f"sessions active in a {win}", color="tab:orange")
        ax_cc.set_xlim(0, len(m_cdf) - 0.5)
        ax_s.set_xlim(0, (len(s_cdf) - 1) * 1.05)
    else:
        ax_cc.set_xlabel(f"models or sessions active in a {win}")
        ax_cc.set_xlim(0, max(len(m_cdf), len(s_cdf)) - 0.5)
    ax_cc.set_ylabel("fraction of windows with traffic (CDF)")
    ax_cc.set_ylim(0, 1.02)
    ax_cc.set_title(f"Concurrency ({win}s that have requests)")
    ax_cc.legend(
        [plt.Line2D([], [], color="tab:blue"), plt.Line2D([], [], color="tab:orange")],
        ["models active", "sessions active"],
        loc="lower right",
    )
    ax_cc.grid(alpha=0.3)


def print_drift(rep: DriftReport) -> None:
    """`workload drift`: the verdict and each dimension's score."""
    colour = {"drift": "bold red", "stable": "green", "too_few_requests": "yellow"}[rep.verdict]
    console.print(f"verdict: [{colour}]{rep.verdict}[/] ({rep.requests} requests in the window)")
    from rich.table import Table

    t = Table("dimension", "value", "score", "fired", "detail")
    for sc in rep.scores:
        fired = "yes" if sc.fired else "no" if sc.held else ""
        detail = f"{sc.detail}; not fired: {sc.held}" if sc.held else sc.detail
        t.add_row(sc.name, f"{sc.value:g}", f"{sc.score:.2f}", fired, detail)
    t.caption = (
        "score: the statistic over its critical value; a dimension fires at 1 or more when the "
        "change is also large enough to matter and enough requests and sessions show it "
        "('not fired' says which of these a score of 1 or more missed)"
    )
    console.print(t)
