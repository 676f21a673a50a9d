"""`planner workload synth|import|inspect|drift`: generate, import, characterize, compare traces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, SeedOpt, console, err_console, print_json
from planner.errors import InputError

ModelsOpt = Annotated[
    Path | None, typer.Option("--models", help="models.yaml: the catalog's model names.")
]
OutOpt = Annotated[
    Path, typer.Option("-o", "--out", help="Output trace: .parquet, .csv or .jsonl.")
]


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
    from planner.app.workload import SynthRequest, synth
    from planner.optimizer.workload.synth_spec import default_spec_yaml

    if print_spec:
        typer.echo(default_spec_yaml(), nl=False)
        return
    if out is None:
        raise InputError("no output file", fix="pass -o trace.parquet (or .csv/.jsonl)")
    req = SynthRequest(out, spec, models, users, days, start, stationary, seed)
    done = synth(req, note=_note, busy=lambda title: console.status(title))
    err_console.print(
        f"wrote {done.path}: {done.requests} requests, {done.users} users, "
        f"{done.sessions} sessions, {done.days} days",
        highlight=False,
    )


def _note(line: str) -> None:
    err_console.print(f"[yellow]note:[/] {line}", highlight=False)


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
    column_map: Annotated[
        str | None,
        typer.Option(
            "--map",
            help="csv/jsonl/parquet: SOURCE=COLUMN,... e.g. time=timestamp,prompt_tokens="
            "input_tokens (OpenAI-log names are known without it).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Import a public trace into the planner schema; skipped rows are counted by reason."""
    from planner.app import workload as service

    summary = service.import_trace(
        fmt,
        src,
        out,
        models=models,
        assign=assign,
        seed=seed,
        column_map=service.column_map(column_map),
    )
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
    from planner.app.workload import inspect
    from planner.cli.workload_show import plot_summary, print_summary

    seen = inspect(trace, full)
    s = seen.summary
    if plot is not None:
        plot_summary(seen.frame, s, plot, title=trace.name)
    if json_out:
        print_json(s)
        return
    print_summary(s, trace)
    if plot is not None:
        console.print(f"figure: {plot}")


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
    from planner.app.workload import drift
    from planner.cli.workload_show import print_drift

    rep = drift(reference, window)
    if json_out:
        print_json(rep.model_dump(mode="json"))
        return
    print_drift(rep)


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
