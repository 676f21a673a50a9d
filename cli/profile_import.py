"""`planner profile import`: serving benchmarks a team already ran, into a GPU's profile
(`planner.app.profile.import_runs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, console, print_json


def import_cmd(
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE",
            help="`vllm bench serve --save-result` JSON files, or CSVs in the shared serving "
            "runs' layout (model_path, system, precision, isl, osl, batch_size, tp_size, "
            "silicon_ttft_ms, silicon_tpot_ms).",
        ),
    ],
    gpu: Annotated[str, typer.Option("--gpu", help="Catalog GPU type the runs ran on.")],
    node: Annotated[
        str | None, typer.Option("--node", help="Node name of the profile (default: this host).")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Profile folder.")] = Path("profiles"),
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="The runs' architecture: a catalog name or a config.json (default: each "
            "run's model id, hub suffixes such as -FP8, -AWQ, -Instruct dropped).",
        ),
    ] = None,
    tp: Annotated[int, typer.Option("--tp", min=1, help="JSON runs: tensor parallel size.")] = 1,
    quantization: Annotated[
        str | None,
        typer.Option(
            "--quantization",
            help="JSON runs: the checkpoint's quantization (default: the one the model id "
            "names, -FP8, -AWQ, ...; else the run's dtype; else bf16).",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", min=1, help="JSON runs: clients, if the file has none."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Add measured serving runs to the profile of one GPU type; then `profile calibrate`."""
    from planner.app.profile import import_runs

    path, runs = import_runs(
        files,
        gpu,
        node=node,
        out=out,
        model=model,
        tp=tp,
        quantization=quantization,
        concurrency=concurrency,
    )
    summary = [_summary(r) for r in runs]
    if json_out:
        print_json({"profile": str(path), "runs": summary})
        return
    for s in summary:
        note = f" (calibrates nothing: {s['reason']})" if s["reason"] else ""
        console.print(f"{s['model']} tp{s['tp']} {s['quantization']}: {s['points']} points{note}")
    usable = sum(s["calibrates"] for s in summary)
    console.print(f"wrote {path}; {usable} of {len(summary)} runs can calibrate", highlight=False)
    if usable:
        console.print(f"next: planner profile calibrate {path}")


def _summary(r) -> dict:
    """What `profile import` reports of one run: whether it calibrates, and why not."""
    why = next(
        (n.removeprefix("not calibrated: ") for n in r.notes if n.startswith("not calibrated:")), ""
    )
    return {
        "model": r.model,
        "tp": r.tp,
        "quantization": r.quantization,
        "arch": r.arch.name if r.arch else None,
        "points": len(r.decode),
        "calibrates": not why,
        "reason": why,
    }
