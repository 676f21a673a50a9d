"""`planner estimate`: memory, latency and switch costs of one model on one GPU type."""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import JsonOpt, console, print_json
from planner.cli.inputs import calibration
from planner.errors import InputError

_COLUMNS = (
    "model",
    "gpu",
    "tp",
    "quantization",
    "kv_cache_dtype",
    "input_len",
    "output_len",
    "concurrency",
    "interconnect",
)
_DEFAULTS: dict[str, Any] = dict(
    tp=1, quantization="bf16", kv_cache_dtype="auto", input_len=1024, output_len=256, concurrency=1
)


def default_interconnect(gpu) -> str:
    """NVLink between the GPUs of SXM boards (the switch joins them all), else PCIe."""
    return "nvlink" if gpu.nvlink_gbps and "SXM" in gpu.name.upper() else "pcie"


@lru_cache(maxsize=1024)
def _arch(spec: str):
    from planner.catalog.models import resolve_arch

    return resolve_arch(spec)


def estimate_row(
    row: dict[str, Any],
    calibs: dict[str, Any],
    where: tuple[str | None, str],
    engine: dict[str, Any] | None = None,
    refs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One scenario -> the JSON keys of `planner estimate`. `where` = (file, path prefix);
    `refs`: GPU type -> what its calibration came from (`calibration_refs`)."""
    from planner.optimizer.perf import BURST_SHARE, CHAIN_SHARE, benchmark_loop, instance_perf
    from planner.optimizer.perf.calib import figure_sources

    arch, gpu, q, kvd, nums, link = _scenario(row, where)
    perf = instance_perf(
        arch,
        q,
        gpu,
        nums["tp"],
        kv_cache_dtype=kvd,
        interconnect=link,
        calib=calibs.get(gpu.name),
        **(engine or {}),
    )
    # clients at fixed lengths, as a serving benchmark runs them: partly in step
    loop = benchmark_loop(perf, nums["input_len"], nums["output_len"], nums["concurrency"])
    ttft, tpot, tps = loop.ttft_s, loop.tpot_s, loop.tokens_per_s
    fin = lambda x: round(x, 6) if math.isfinite(x) else None  # noqa: E731
    return {
        "model": arch.name,
        "gpu": gpu.name,
        "tp": nums["tp"],
        "quantization": q,
        "interconnect": link,
        "input_len": nums["input_len"],
        "output_len": nums["output_len"],
        "concurrency": nums["concurrency"],
        "fits": perf.fits,
        "weights_gib_per_gpu": round(perf.weights_gib_per_gpu, 4),
        "kv_bytes_per_token": perf.kv_bytes_per_token,
        "max_kv_tokens": perf.max_kv_tokens,
        # what the engine runs with: the flags given, else vLLM's defaults for this GPU
        "max_num_seqs": perf.max_num_seqs,
        "max_num_batched_tokens": perf.chunk_tokens,
        # the shares of requests sent in the first round, all clients at once, and of the
        # rest still in its order (closedloop.py)
        "burst_share": BURST_SHARE,
        "chain_share": CHAIN_SHARE,
        "ttft_s": fin(ttft),
        "tpot_s": fin(tpot),
        "output_tokens_per_s": round(tps, 3),
        # which kernel layer gave the linear layers' rate: measured, interpolated, roofline
        "source": perf.step.kernel_source,
        "cold_start_s": round(perf.cold_start_s, 3),
        "wake_host_s": round(perf.wake_host_s, 3),
        "wake_disk_s": round(perf.wake_disk_s, 3),
        # per figure: calibrated or not, and from which runs (the profile's calibration)
        "calibration": _figure_sources(figure_sources, (refs or {}).get(gpu.name), arch.name),
    }


def _figure_sources(figure_sources, ref, model: str) -> dict[str, Any]:
    if ref is None:
        return figure_sources([], "", [], None)
    return figure_sources(ref.fields, ref.source, ref.runs, ref.models.get(model))


def _scenario(row: dict[str, Any], where: tuple[str | None, str]) -> tuple:
    """(arch, GPU, quantization, KV dtype, {tp, input_len, output_len, concurrency},
    interconnect) of one scenario, each checked; an InputError names the flag or column."""
    from planner.catalog.gpus import resolve_gpu
    from planner.optimizer.perf.memory import KV_DTYPES, WEIGHT_QUANTS
    from planner.schemas import check_tp

    file, pre = where
    f = lambda name: f"{pre}{name}" if pre else f"--{name.replace('_', '-')}"  # noqa: E731
    try:
        arch = _arch(str(row["model"]))
    except ValueError as e:
        raise InputError(
            str(e),
            file=file,
            path=f("model"),
            fix="use a name from `planner catalog models` or a config.json path",
        ) from None
    try:
        gpu = resolve_gpu(str(row["gpu"]))
    except ValueError as e:
        raise InputError(
            str(e), file=file, path=f("gpu"), fix="use a name from `planner catalog gpus`"
        ) from None
    q, kvd = str(row["quantization"]), str(row["kv_cache_dtype"])
    if q not in WEIGHT_QUANTS:
        raise InputError(
            f"unknown quantization {q!r}",
            file=file,
            path=f("quantization"),
            fix=f"use one of {list(WEIGHT_QUANTS)}",
        )
    if kvd not in KV_DTYPES:
        raise InputError(
            f"unknown KV cache dtype {kvd!r}",
            file=file,
            path=f("kv_cache_dtype"),
            fix=f"use one of {list(KV_DTYPES)}",
        )
    nums = {}
    for k, lo in (("tp", 1), ("input_len", 1), ("output_len", 1), ("concurrency", 1)):
        try:
            nums[k] = int(row[k])
        except (TypeError, ValueError):
            raise InputError(
                f"{row[k]!r} is not an integer", file=file, path=f(k), fix="give a whole number"
            ) from None
        if nums[k] < lo:
            raise InputError(
                f"{nums[k]} is below {lo}", file=file, path=f(k), fix=f"use a value >= {lo}"
            )
    check_tp(arch.num_attention_heads, arch.num_kv_heads, nums["tp"], file, f("tp"))
    link = row.get("interconnect") or default_interconnect(gpu)
    if link not in ("pcie", "nvlink"):
        raise InputError(
            f"unknown interconnect {link!r}",
            file=file,
            path=f("interconnect"),
            fix="use pcie or nvlink",
        )
    return arch, gpu, q, kvd, nums, link


def _read_batch(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(
            f"cannot read: {e.__class__.__name__}", file=str(path), fix="check the path"
        ) from None
    reader = csv.DictReader(text.splitlines())
    cols = reader.fieldnames or []
    if not cols:
        raise InputError(
            "the file is empty", file=str(path), fix=f"write a header line with {list(_COLUMNS)}"
        )
    unknown = [c for c in cols if c not in _COLUMNS]
    if unknown:
        raise InputError(
            f"unknown column(s) {unknown}",
            file=str(path),
            path="header",
            fix=f"use columns from {list(_COLUMNS)}",
        )
    for need in ("model", "gpu"):
        if need not in cols:
            raise InputError(
                f"missing column {need!r}",
                file=str(path),
                path="header",
                fix=f"add a {need} column",
            )
    rows = []
    for r in reader:
        rows.append(
            {k: (r.get(k) if r.get(k) not in (None, "") else _DEFAULTS.get(k)) for k in _COLUMNS}
        )
    return rows


def _print_human(r: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(
        title=f"{r['model']} {r['quantization']} on {r['tp']} x {r['gpu']}", show_header=False
    )
    t.add_column("quantity")
    t.add_column("value", justify="right")

    def show(x: float | None, fmt: str, unit: str) -> str:
        return "n/a (does not fit)" if x is None else f"{format(x, fmt)} {unit}"

    t.add_row("weights per GPU", f"{r['weights_gib_per_gpu']:.2f} GiB")
    t.add_row("KV bytes per token", f"{r['kv_bytes_per_token']:,.0f}")
    t.add_row("max KV tokens", f"{r['max_kv_tokens']:,}")
    t.add_row(
        "max_num_seqs / batched tokens", f"{r['max_num_seqs']} / {r['max_num_batched_tokens']}"
    )
    t.add_row("TTFT (mean, see below)", show(r["ttft_s"], ".3f", "s"))
    t.add_row("TPOT (mean)", show(r["tpot_s"], ".4f", "s"))
    t.add_row("output tokens/s", f"{r['output_tokens_per_s']:.1f}")
    t.add_row("linear layers' rate from", r["source"])
    t.add_row("cold start", f"{r['cold_start_s']:.1f} s")
    t.add_row("wake from host RAM", f"{r['wake_host_s']:.2f} s")
    t.add_row("wake from disk", f"{r['wake_disk_s']:.1f} s")
    console.print(t)
    fitted = {k: v for k, v in r["calibration"].items() if v["calibrated"]}
    if fitted:  # which figures a profile's calibration moved, and from what
        first = next(iter(fitted.values()))
        console.print(f"calibrated: {', '.join(fitted)} ({first['source']})", highlight=False)
    else:
        console.print("calibrated: none (the GPU generation's defaults)", highlight=False)
    if r["ttft_s"] is not None:
        n = r["concurrency"]
        console.print(
            f"TTFT: {n} client{'s' if n != 1 else ''} sending requests back to back; "
            f"{r['burst_share']:.0%} of the requests arrive together with the others' and queue "
            "behind their prompts (as in a serving benchmark), the rest find the engine decoding.",
            highlight=False,
        )
    if not r["fits"]:
        console.print(
            "[yellow]the KV cache cannot hold one max-model-len sequence: raise --tp, quantize, "
            "or lower --max-model-len[/]"
        )


_Model = Annotated[
    str | None, typer.Option("--model", help="Catalog name, org/name, or a config.json path.")
]
_Gpu = Annotated[str | None, typer.Option("--gpu", help="GPU type (`planner catalog gpus`).")]
_Quantization = Annotated[
    str,
    typer.Option(
        "--quantization",
        help="bf16, fp16, fp8, awq, gptq, int4, mxfp4 or nvfp4 (fp4 only on Blackwell).",
    ),
]
_MaxModelLen = Annotated[
    int | None,
    typer.Option("--max-model-len", min=16, help="Longest sequence; default min(model's, 32768)."),
]
_GpuMemoryUtilization = Annotated[
    float,
    typer.Option(
        "--gpu-memory-utilization", min=0.05, max=1.0, help="Share of GPU memory vLLM may use."
    ),
]
_MaxNumSeqs = Annotated[
    int | None,
    typer.Option(
        "--max-num-seqs", min=1, help="Batch cap; default: vLLM's for the GPU (see --json)."
    ),
]
_MaxNumBatchedTokens = Annotated[
    int | None,
    typer.Option(
        "--max-num-batched-tokens",
        min=16,
        help="Tokens per step (chunked prefill); default: vLLM's for the GPU.",
    ),
]
_Interconnect = Annotated[
    str | None,
    typer.Option(
        "--interconnect", help="pcie or nvlink between the TP GPUs; default: nvlink on SXM."
    ),
]
_EntryPoint = Annotated[
    str,
    typer.Option(
        "--entry-point",
        help="How vLLM is started, which sets its defaults: serve (OpenAI server) or offline (LLM class).",
    ),
]
_Profiles = Annotated[
    Path | None,
    typer.Option("--profiles", help="Profile dir/file: fitted factors replace the defaults."),
]
_Batch = Annotated[
    Path | None, typer.Option("--batch", help="CSV of scenarios (columns named like the flags).")
]


def register(app: typer.Typer) -> None:
    """Add `planner estimate`."""
    app.command("estimate")(estimate)


def estimate(
    model: _Model = None,
    gpu: _Gpu = None,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel degree.")] = 1,
    quantization: _Quantization = "bf16",
    kv_cache_dtype: Annotated[str, typer.Option("--kv-cache-dtype", help="auto or fp8.")] = "auto",
    input_len: Annotated[int, typer.Option("--input-len", help="Prompt tokens.")] = 1024,
    output_len: Annotated[int, typer.Option("--output-len", help="Generated tokens.")] = 256,
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Clients sending back to back.")
    ] = 1,
    max_model_len: _MaxModelLen = None,
    gpu_memory_utilization: _GpuMemoryUtilization = 0.9,
    max_num_seqs: _MaxNumSeqs = None,
    max_num_batched_tokens: _MaxNumBatchedTokens = None,
    interconnect: _Interconnect = None,
    entry_point: _EntryPoint = "serve",
    profiles: _Profiles = None,
    batch: _Batch = None,
    json_out: JsonOpt = False,
) -> None:
    """Memory per GPU, KV capacity, TTFT/TPOT at a concurrency, and switch costs."""
    _check_entry_point(entry_point)
    calibs = calibration(profiles) or {}
    from planner.app.inputs import calibration_refs

    refs = calibration_refs(profiles)
    engine = dict(
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        entry_point=entry_point,
    )
    if batch is not None:
        rows = _read_batch(batch)
        out = [
            estimate_row(r, calibs, (str(batch), f"row {i + 1}."), engine, refs)
            for i, r in enumerate(rows)
        ]
        if json_out:
            print_json(out)
        else:
            for r in out:
                _print_human(r)
        return
    if model is None or gpu is None:
        raise InputError(
            "--model and --gpu are required (or --batch FILE)",
            path="--model" if model is None else "--gpu",
            fix="e.g. `planner estimate --model Llama-3.1-8B-Instruct --gpu L40S`",
        )
    row = dict(
        model=model,
        gpu=gpu,
        tp=tp,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        input_len=input_len,
        output_len=output_len,
        concurrency=concurrency,
        interconnect=interconnect,
    )
    r = estimate_row(row, calibs, (None, ""), engine, refs)
    if json_out:
        print_json(r)
    else:
        _print_human(r)


def _check_entry_point(entry_point: str) -> None:
    """`--entry-point` names one vLLM has."""
    from planner.engines.base import ENTRY_POINTS

    if entry_point not in ENTRY_POINTS:
        raise InputError(
            f"unknown entry point {entry_point!r}",
            path="--entry-point",
            fix=f"use one of {list(ENTRY_POINTS)}",
        )
