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
            got = runs_from_serving_csv(f, gpu_type, model)
            if not got:
                raise InputError(
                    f"no row of {gpu_type} (column system)",
                    file=str(f),
                    fix="pass the --gpu the rows ran on",
                )
            runs += got
        else:
            runs.append(runs_from_vllm_json(f, model, tp, quantization, concurrency))
    for (
        r
    ) in runs:  # a run the perf model cannot predict is kept, and says why it calibrates nothing
        why = fit_reason(r, gpu_type)
        if why and not any(n.startswith("not calibrated:") for n in r.notes):
            r.notes.append(f"not calibrated: {why}")
    prof = store.load_or_new(out, node or socket.gethostname(), gpu_type)

    def key(r) -> tuple:
        return (r.model, r.tp, r.quantization, r.notes[0] if r.notes else "")

    new = {key(r) for r in runs}
    prof.engine = [r for r in prof.engine if key(r) not in new] + runs  # a file again: replaced
    path = store.save(prof, store.profile_path(out, prof.node, gpu_type))
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


def fit_reason(run, gpu_type: str) -> str:
    """Why the perf model cannot predict `run` on `gpu_type` ("" when it can): no
    architecture, an unknown quantization, or weights and one request's KV that do not fit
    its TP GPUs (the planner would not place it there)."""
    from planner.catalog.gpus import resolve_gpu
    from planner.optimizer.perf import instance_perf

    if run.arch is None:
        return "model not in the catalog"
    try:
        gpu = resolve_gpu(gpu_type)
        perf = instance_perf(run.arch, run.quantization or "bf16", gpu, run.tp)
    except ValueError as e:
        return str(e)
    longest = max((d.prompt_tokens + d.output_tokens for d in run.decode), default=0)
    if perf.max_kv_tokens < max(1, longest):
        return (
            f"does not fit {run.tp} x {gpu_type} as the planner models it "
            f"({perf.weights_gib_per_gpu:.0f} GiB of weights per GPU)"
        )
    return ""


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
