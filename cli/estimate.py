"""`planner estimate`: memory, latency and switch costs of one model on one GPU type
(`planner.app.estimate`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from planner.cli.common import JsonOpt, console, err_console, print_json

if TYPE_CHECKING:
    from planner.app.estimate import Estimate


def _print_human(r: Estimate) -> None:
    from rich.table import Table

    t = Table(title=f"{r.model} {r.quantization} on {r.tp} x {r.gpu}", show_header=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")

    def show(x: float | None, fmt: str, unit: str) -> str:
        return "n/a (does not fit)" if x is None else f"{format(x, fmt)} {unit}"

    t.add_row("weights per GPU", f"{r.weights_gib_per_gpu:.2f} GiB")
    t.add_row("KV bytes per token", f"{r.kv_bytes_per_token:,.0f}")
    t.add_row("max KV tokens", f"{r.max_kv_tokens:,}")
    t.add_row("max_num_seqs / batched tokens", f"{r.max_num_seqs} / {r.max_num_batched_tokens}")
    t.add_row("TTFT (mean, see below)", show(r.ttft_s, ".3f", "s"))
    t.add_row("TPOT (mean)", show(r.tpot_s, ".4f", "s"))
    t.add_row("output tokens/s", f"{r.output_tokens_per_s:.1f}")
    t.add_row("linear layers' rate from", r.source)
    t.add_row("cold start", f"{r.cold_start_s:.1f} s")
    t.add_row("wake from host RAM", f"{r.wake_host_s:.2f} s")
    t.add_row("wake from disk", f"{r.wake_disk_s:.1f} s")
    console.print(t)
    fitted = {k: v for k, v in r.calibration.items() if v["calibrated"]}
    if fitted:  # which figures a profile's calibration moved, and from what
        first = next(iter(fitted.values()))
        console.print(f"calibrated: {', '.join(fitted)} ({first['source']})", highlight=False)
    else:
        console.print("calibrated: none (the GPU generation's defaults)", highlight=False)
    if r.ttft_s is not None:
        n = r.concurrency
        console.print(
            f"TTFT: {n} client{'s' if n != 1 else ''} sending requests back to back; "
            f"{r.burst_share:.0%} of the requests arrive together with the others' and queue "
            "behind their prompts (as in a serving benchmark), the rest find the engine decoding.",
            highlight=False,
        )
    if not r.fits:
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
    from planner.app import estimate as service

    engine = service.EngineSettings(
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        entry_point=entry_point,
    )
    one = service.Scenario(
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
    scenarios = batch if batch is not None else [one]
    out = service.estimate(scenarios, engine, profiles, warn=_warn)
    if json_out:
        print_json([r.to_json() for r in out] if batch is not None else out[0].to_json())
    else:
        for r in out:
            _print_human(r)


def _warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/] {message}", highlight=False)
