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


def _model_contexts(path: Path | None) -> dict[str, int]:
    """The models file's names and their max_context (file order); empty without a file."""
    if path is None:
        return {}
    from planner.schemas import load_models

    return {m.name: m.max_context for m in load_models(path).models}


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
    limits = _model_contexts(models)
    if limits:
        s, notes = bind_models(s, list(limits))
        for note in notes:
            err_console.print(f"[yellow]note:[/] {note}", highlight=False)
    from planner.trace.write import write_trace

    with console.status("generating"):
        df = synth(s, seed=seed, max_context=limits)
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
    from planner.trace.importers import import_trace
    from planner.trace.write import write_trace

    _check_out(out)
    names = list(_model_contexts(models)) or None
    if assign is None and names and fmt in ("azure", "mooncake", "servegen"):
        assign = "hash"  # these formats have no model column
    df, summary = import_trace(
        fmt, src, model_names=names, assign=assign, seed=seed, column_map=_column_map(column_map)
    )
    write_trace(df, out)
    if json_out:
        print_json({**summary.as_dict(), "out": str(out)})
        return
    console.print(f"read {summary.rows_read} rows from {src}, kept {summary.rows_kept} -> {out}")
    for reason, n in summary.skipped.items():
        console.print(f"  skipped {n}: {reason}", highlight=False)
    for rule in summary.rules:
        console.print(f"  rule: {rule}", highlight=False)


def _column_map(text: str | None) -> dict[str, str]:
    """`--map a=b,c=d` as {a: b, c: d}; InputError naming the malformed pair."""
    out: dict[str, str] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        src, sep, dst = pair.partition("=")
        if not sep or not src.strip() or not dst.strip():
            raise InputError(
                f"{pair.strip()!r} is not SOURCE=COLUMN", path="--map",
                fix="e.g. --map time=timestamp,prompt_tokens=input_tokens",
            )  # fmt: skip
        out[src.strip()] = dst.strip()
    return out


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
    from planner.cli.workload_show import plot_summary, print_summary
    from planner.optimizer.workload.characterize import summarize
    from planner.trace.frame import read_trace

    df = read_trace(trace)
    s = summarize(df, full=full)
    if plot is not None:
        plot_summary(df, s, plot, title=trace.name)
    if json_out:
        print_json(s)
        return
    print_summary(s, trace)
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
    from planner.trace.frame import read_trace

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
