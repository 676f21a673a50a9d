"""`planner profile import`: serving benchmarks a team already ran, into a GPU's profile."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, console, print_json
from planner.errors import InputError


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
        str | None, typer.Option("--model", help="JSON runs: model (default: its model_id).")
    ] = None,
    tp: Annotated[int, typer.Option("--tp", min=1, help="JSON runs: tensor parallel size.")] = 1,
    quantization: Annotated[
        str, typer.Option("--quantization", help="JSON runs: the checkpoint's quantization.")
    ] = "bf16",
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", min=1, help="JSON runs: clients, if the file has none."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Add measured serving runs to the profile of one GPU type; then `profile calibrate`."""
    from planner.catalog.gpus import resolve_gpu
    from planner.profiler import store
    from planner.profiler.serving_import import runs_from_serving_csv, runs_from_vllm_json

    try:
        gpu_type = resolve_gpu(gpu).name
    except ValueError as e:
        raise InputError(str(e), path="--gpu", fix="see `planner catalog gpus`") from None
    runs = []
    for f in files:
        if not f.is_file():
            raise InputError("no such file", file=str(f), fix="check the path")
        if f.suffix.lower() == ".csv":
            got = runs_from_serving_csv(f, gpu_type)
            if not got:
                raise InputError(
                    f"no row of {gpu_type} (column system)",
                    file=str(f),
                    fix="pass the --gpu the rows ran on",
                )
            runs += got
        else:
            runs.append(runs_from_vllm_json(f, model, tp, quantization, concurrency))
    prof = store.load_or_new(out, node or socket.gethostname(), gpu_type)
    new = {(r.model, r.tp, r.quantization, tuple(r.notes)) for r in runs}
    prof.engine = [
        r for r in prof.engine if (r.model, r.tp, r.quantization, tuple(r.notes)) not in new
    ] + runs  # importing a file again replaces what it gave
    path = store.save(prof, store.profile_path(out, prof.node, gpu_type))
    summary = [
        {"model": r.model, "tp": r.tp, "quantization": r.quantization, "points": len(r.decode),
         "calibrates": r.arch is not None}
        for r in runs
    ]  # fmt: skip
    if json_out:
        print_json({"profile": str(path), "runs": summary})
        return
    for s in summary:
        note = "" if s["calibrates"] else " (not in the catalog: calibration skips it)"
        console.print(f"{s['model']} tp{s['tp']} {s['quantization']}: {s['points']} points{note}")
    console.print(f"wrote {path}; next: planner profile calibrate {path}")
