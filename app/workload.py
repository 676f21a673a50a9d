"""The workload service: generate a team's agent traffic from a spec (`synth`), import a
public trace into the planner schema (`import_trace`), characterize a trace (`inspect`)
and say whether traffic drifted from what a plan was optimized for (`drift`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from planner.optimizer.workload.characterize import WorkloadSummary
    from planner.optimizer.workload.drift import DriftReport
    from planner.optimizer.workload.synth_spec import SynthSpec
    from planner.trace.importers import ImportSummary

_OUT_SUFFIXES = (".parquet", ".csv", ".jsonl")


def model_contexts(path: Path | None) -> dict[str, int]:
    """The models file's names and their max_context (file order); empty without a file."""
    if path is None:
        return {}
    from planner.schemas import load_models

    return {m.name: m.max_context for m in load_models(path).models}


def check_out(out: Path) -> None:
    """A trace is written as .parquet, .csv or .jsonl: say so before any work."""
    if out.suffix.lower() not in _OUT_SUFFIXES:
        raise InputError(
            f"cannot write a trace as {out.suffix or 'a file without suffix'}",
            file=str(out),
            fix=f"end the output name in one of {', '.join(_OUT_SUFFIXES)}",
        )


@dataclass(frozen=True)
class SynthRequest:
    """What `planner workload synth` was asked: a spec (None: the default one) and what
    overrides it, the models file whose names the roles take, the seed and the output."""

    out: Path
    spec: Path | None = None
    models: Path | None = None
    users: int | None = None
    days: int | None = None
    start: str | None = None  # ISO date of day 0
    stationary: bool = False
    seed: int = 0


@dataclass(frozen=True)
class Synthesized:
    """The trace written and what it holds."""

    path: Path
    requests: int
    users: int
    sessions: int
    days: int


def synth(
    req: SynthRequest,
    note: Callable[[str], None] = lambda _: None,
    busy: Callable[[str], AbstractContextManager[object]] = lambda _: nullcontext(),
) -> Synthesized:
    """Generate the traffic `req` names and write it (same seed, same bytes); `note` hears
    how the spec's roles were mapped onto the models, `busy(title)` wraps the generation."""
    from planner.optimizer.workload.synth import synth as generate
    from planner.optimizer.workload.synth_spec import bind_models
    from planner.trace.write import write_trace

    check_out(req.out)
    s = _spec(req.spec)
    update: dict[str, Any] = {}
    if req.users is not None:
        update["users"] = req.users
    if req.days is not None:
        update["days"] = req.days
    if req.stationary:
        update["stationary"] = True
    if req.start is not None:
        try:
            update["start"] = dt.date.fromisoformat(req.start[:10])
        except ValueError:
            raise InputError(
                f"--start {req.start!r} is not an ISO date", fix="e.g. --start 2026-01-05"
            ) from None
    if update:
        s = s.model_validate({**s.model_dump(), **update})
    limits = model_contexts(req.models)
    if limits:
        s, notes = bind_models(s, list(limits))
        for n in notes:
            note(n)
    with busy("generating"):
        df = generate(s, seed=req.seed, max_context=limits)
    write_trace(df, req.out)
    return Synthesized(
        req.out, len(df), int(df["user"].nunique()), int(df["session"].nunique()), s.days
    )


def _spec(path: Path | None) -> SynthSpec:
    from planner.optimizer.workload.synth_spec import default_spec

    if path is None:
        return default_spec()
    from planner.app.files import synth_spec

    return synth_spec(path)


def import_trace(
    fmt: str,
    src: Path,
    out: Path,
    *,
    models: Path | None = None,
    assign: str | None = None,
    seed: int = 0,
    column_map: dict[str, str] | None = None,
) -> ImportSummary:
    """Import `src` (format `fmt`) into the planner schema and write it to `out`; skipped
    rows are counted by reason. Formats without a model column assign by hash by default."""
    from planner.trace.importers import import_trace as read
    from planner.trace.write import write_trace

    check_out(out)
    names = list(model_contexts(models)) or None
    if assign is None and names and fmt in ("azure", "mooncake", "servegen"):
        assign = "hash"  # these formats have no model column
    df, summary = read(
        fmt, src, model_names=names, assign=assign, seed=seed, column_map=column_map or {}
    )
    write_trace(df, out)
    return summary


def column_map(text: str | None) -> dict[str, str]:
    """`--map a=b,c=d` as {a: b, c: d}; InputError naming the malformed pair."""
    out: dict[str, str] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        src, sep, dst = pair.partition("=")
        if not sep or not src.strip() or not dst.strip():
            raise InputError(
                f"{pair.strip()!r} is not SOURCE=COLUMN",
                path="--map",
                fix="e.g. --map time=timestamp,prompt_tokens=input_tokens",
            )
        out[src.strip()] = dst.strip()
    return out


@dataclass(frozen=True)
class Inspection:
    """A trace and its characterization (the plan's `workload_summary` format)."""

    frame: pd.DataFrame
    summary: WorkloadSummary


def inspect(trace: Path, full: bool = False) -> Inspection:
    """Characterize a trace: rates, lengths, switches, gaps, prefix reuse, concurrency
    (`full`: per-user switch matrices too)."""
    from planner.optimizer.workload.characterize import summarize
    from planner.trace.frame import read_trace

    df = read_trace(trace)
    return Inspection(df, summarize(df, full=full))


def drift(reference: Path, window: Path) -> DriftReport:
    """Has the traffic of `window` drifted from `reference`'s? Each a plan (its
    workload_summary) or a trace."""
    from planner.optimizer.workload.drift import drift as compare

    return compare(_load_reference(reference), _load_reference(window))


def _load_reference(path: Path) -> WorkloadSummary:
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
