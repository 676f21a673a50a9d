"""`planner estimate`: memory, latency and switch costs of one model on one GPU type
(`planner.app.estimate`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from planner.cli.common import JsonOpt, err_console, print_json
from planner.cli.estimate_show import print_estimate

if TYPE_CHECKING:
    from planner.engines.base import EntryPoint

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
        # any text here: the service refuses one vLLM lacks (check_entry_point)
        entry_point=cast("EntryPoint", entry_point),
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
            print_estimate(r)


def _warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/] {message}", highlight=False)
