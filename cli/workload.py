"""`planner workload synth|import|inspect|drift`: generate, import, characterize, compare traces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import JsonOpt, SeedOpt, console, err_console, print_json
from planner.errors import InputError

ModelsOpt = Annotated[
    Path | None, typer.Option("--models", help="models.yaml: the catalog's model names.")
]
OutOpt = Annotated[
    Path, typer.Option("-o", "--out", help="Output trace: .parquet, .csv or .jsonl.")
]

_OUT_SUFFIXES = (".parquet", ".csv", ".jsonl")


def _model_names(path: Path | None) -> list[str] | None:
    if path is None:
        return None
    from planner.schemas import load_models

    return list(load_models(path).names)


def _check_out(out: Path) -> None:
    if out.suffix.lower() not in _OUT_SUFFIXES:
        raise InputError(
            f"cannot write a trace as {out.suffix or 'a file without suffix'}",
            file=str(out),
            fix=f"end the output name in one of {', '.join(_OUT_SUFFIXES)}",
        )


def _spec(path: Path | None):
    from planner.optimizer.workload.synth_spec import default_spec

    if path is None:
        return default_spec()
    from planner.cli.inputs import synth_spec

    return synth_spec(path)


def synth_cmd(
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Output trace: .parquet, .csv or .jsonl.")
    ] = None,
    models: ModelsOpt = None,
    spec: Annotated[
        Path | None, typer.Option("--spec", help="Spec YAML (keys overlay the defaults).")
    ] = None,
    users: Annotated[
        int | None, typer.Option("--users", min=1, help="Developers (overrides the spec).")
    ] = None,
    days: Annotated[
        int | None, typer.Option("--days", min=1, help="Days (overrides the spec).")
    ] = None,
    start: Annotated[
        str | None, typer.Option("--start", help="ISO date of day 0 (overrides the spec).")
    ] = None,
    stationary: Annotated[
        bool, typer.Option("--stationary", help="No drift; every day the same pattern.")
    ] = False,
    seed: SeedOpt = 0,
    print_spec: Annotated[
        bool, typer.Option("--print-spec", help="Print the default spec YAML and exit.")
    ] = False,
) -> None:
    """Generate agent traffic of a developer team (same seed, same bytes)."""
    from planner.optimizer.workload.synth import synth
    from planner.optimizer.workload.synth_spec import bind_models, default_spec_yaml

    if print_spec:
        typer.echo(default_spec_yaml(), nl=False)
        return
    if out is None:
        raise InputError("no output file", fix="pass -o trace.parquet (or .csv/.jsonl)")
    _check_out(out)
    s = _spec(spec)
    update: dict[str, Any] = {}
    if users is not None:
        update["users"] = users
    if days is not None:
        update["days"] = days
    if stationary:
        update["stationary"] = True
    if start is not None:
        import datetime as dt

        try:
            update["start"] = dt.date.fromisoformat(start[:10])
        except ValueError:
            raise InputError(
                f"--start {start!r} is not an ISO date", fix="e.g. --start 2026-01-05"
            ) from None
    if update:
        s = s.model_validate({**s.model_dump(), **update})
    names = _model_names(models)
    if names:
        s, notes = bind_models(s, names)
        for note in notes:
            err_console.print(f"[yellow]note:[/] {note}", highlight=False)
    from planner.trace import write_trace

    with console.status("generating"):
        df = synth(s, seed=seed)
    write_trace(df, out)
    err_console.print(
        f"wrote {out}: {len(df)} requests, {df['user'].nunique()} users, "
        f"{df['session'].nunique()} sessions, {s.days} days",
        highlight=False,
    )


def import_cmd(
    src: Annotated[
        Path,
        typer.Argument(
            metavar="SOURCE", help="Source file (servegen: a file or a folder of client CSVs)."
        ),
    ],
    fmt: Annotated[
        str, typer.Option("--format", help="azure|mooncake|burstgpt|servegen|csv|jsonl|parquet")
    ],
    out: OutOpt,
    models: ModelsOpt = None,
    assign: Annotated[
        str | None,
        typer.Option("--assign", help="hash, or a mix like coder-32b=0.5,planner-7b=0.5 (seeded)."),
    ] = None,
    seed: SeedOpt = 0,
    json_out: JsonOpt = False,
) -> None:
    """Import a public trace into the planner schema; skipped rows are counted by reason."""
    from planner.importers import import_trace
    from planner.trace import write_trace

    _check_out(out)
    names = _model_names(models)
    if assign is None and names and fmt in ("azure", "mooncake", "servegen"):
        assign = "hash"  # these formats have no model column
    df, summary = import_trace(fmt, src, model_names=names, assign=assign, seed=seed)
    write_trace(df, out)
    if json_out:
        print_json({**summary.as_dict(), "out": str(out)})
        return
    console.print(f"read {summary.rows_read} rows from {src}, kept {summary.rows_kept} -> {out}")
    for reason, n in summary.skipped.items():
        console.print(f"  skipped {n}: {reason}", highlight=False)
    for rule in summary.rules:
        console.print(f"  rule: {rule}", highlight=False)


def inspect_cmd(
    trace: Annotated[
        Path, typer.Argument(metavar="TRACE", help="Trace file (.csv, .jsonl, .parquet, .sqlite).")
    ],
    json_out: JsonOpt = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write one PNG figure here.")] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Add per-user switch matrices (JSON).")
    ] = False,
) -> None:
    """Characterize a trace: rates, lengths, switches, gaps, prefix reuse, concurrency."""
    from planner.optimizer.workload.characterize import summarize
    from planner.trace import read_trace

    df = read_trace(trace)
    s = summarize(df, full=full)
    if plot is not None:
        plot_summary(df, s, plot, title=trace.name)
    if json_out:
        print_json(s)
        return
    _print_summary(s, trace)
    if plot is not None:
        console.print(f"figure: {plot}")


def _load_reference(path: Path) -> dict[str, Any]:
    """A summary from a plan (its workload_summary) or from a trace."""
    if path.suffix.lower() in (".yaml", ".yml"):
        from planner.schemas import load_plan

        plan = load_plan(path)
        if not plan.workload_summary:
            raise InputError(
                "the plan has no workload_summary",
                file=str(path),
                fix="re-run `planner optimize`, or pass the trace it was optimized for",
            )
        return dict(plan.workload_summary)
    from planner.optimizer.workload.characterize import summarize
    from planner.trace import read_trace

    return summarize(read_trace(path))


def drift_cmd(
    reference: Annotated[
        Path,
        typer.Argument(metavar="REFERENCE", help="plan.yaml (its workload_summary) or a trace."),
    ],
    window: Annotated[
        Path, typer.Argument(metavar="WINDOW", help="Trace of the window, or a plan.")
    ],
    json_out: JsonOpt = False,
) -> None:
    """Has the traffic drifted from what the plan was optimized for? Exit 0 either way."""
    from planner.optimizer.workload.drift import drift

    ref = _load_reference(reference)
    win = _load_reference(window)
    rep = drift(ref, win)
    if json_out:
        print_json(rep.model_dump(mode="json"))
        return
    colour = {"drift": "bold red", "stable": "green", "too_few_requests": "yellow"}[rep.verdict]
    console.print(f"verdict: [{colour}]{rep.verdict}[/] ({rep.requests} requests in the window)")
    from rich.table import Table

    t = Table("dimension", "value", "score (>=1 fires)", "fired", "detail")
    for sc in rep.scores:
        t.add_row(sc.name, f"{sc.value:g}", f"{sc.score:.2f}", "yes" if sc.fired else "", sc.detail)
    console.print(t)


def _print_summary(s: dict[str, Any], path: Path) -> None:
    from rich.table import Table

    if not s.get("requests"):
        console.print(f"{path}: no requests")
        return
    dur_h = s["duration_s"] / 3600.0
    console.print(
        f"[bold]{path}[/]: {s['requests']} requests over {dur_h:.1f} h, {s['users']} users, "
        f"{s['sessions']} sessions; switch rate {s['switch']['rate']:.1%}; "
        f"peak {s['peak_hour_requests_per_s'] * 3600:.0f} requests/h"
    )
    t = Table(
        "model",
        "share",
        "peak req/h",
        "peak hour",
        "input mean / p95",
        "output mean / p95",
        "prefix reuse",
        "idle>60s arrivals/h",
        title="per model",
    )
    grid = s["idle_arrivals_per_hour"]["idle_s"]
    j60 = grid.index(60) if 60 in grid else 0
    for m in s["models"]:
        ln, pk = s["lengths"][m], s["peak"][m]
        t.add_row(
            m,
            f"{s['mix'][m]:.1%}",
            f"{pk['requests_per_s'] * 3600:.0f}",
            f"{pk['hour_of_day']:02d}:00",
            f"{ln['input_mean']:.0f} / {ln['input_p50_p95'][1]:.0f}",
            f"{ln['output_mean']:.0f} / {ln['output_p50_p95'][1]:.0f}",
            f"{s['prefix'][m]['reuse_ratio']:.0%}",
            f"{s['idle_arrivals_per_hour'][m][j60]:.1f}",
        )
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from planner.io import atomic_write_bytes

    models = s["models"]
    fig = plt.figure(figsize=(15, 9), constrained_layout=True)
    gs = fig.add_gridspec(2, 2, height_ratios=[1, 1.1])
    ax_rate = fig.add_subplot(gs[0, :])
    ax_sw = fig.add_subplot(gs[1, 0])
    ax_cc = fig.add_subplot(gs[1, 1])
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

    cc = s["concurrency"]
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
    fig.suptitle(
        f"{title}: {s['requests']} requests, {s['users']} users, {s['sessions']} sessions",
        fontsize=13,
    )
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def register(app: typer.Typer) -> None:
    """Add `planner workload ...`."""
    sub = typer.Typer(
        name="workload",
        help="Generate, import, characterize and compare request traces.",
        no_args_is_help=True,
    )
    sub.command("synth")(synth_cmd)
    sub.command("import")(import_cmd)
    sub.command("inspect")(inspect_cmd)
    sub.command("drift")(drift_cmd)
    app.add_typer(sub, name="workload")
