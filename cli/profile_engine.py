"""`planner profile engine`: real vLLM servers measured one run at a time (here, or on every
node through Ray), stored in the node's profile (`planner.app.profile`; cli/profile_show.py
prints it). Also the options the profile commands share (cli/profile.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, err_console
from planner.cli.profile_show import progress as progress  # cli/profile.py takes it from here
from planner.cli.profile_show import show_planned, show_profile, show_ray_profile, steps_bar

OutOpt = Annotated[
    Path, typer.Option("-o", "--out", help="Profile directory (one YAML per node and GPU type).")
]
NodeOpt = Annotated[
    str | None,
    typer.Option("--node", help="Node name as in cluster.yaml; default: this host's name."),
]


def engine_cmd(
    models_file: Annotated[Path, typer.Option("--models", help="models.yaml")],
    model: Annotated[str | None, typer.Option("--model", help="Only this model.")] = None,
    variant: Annotated[str | None, typer.Option("--variant", help="Only this variant.")] = None,
    tp: Annotated[
        list[int] | None,
        typer.Option("--tp", help="TP degrees (repeatable); default: the smallest that fits."),
    ] = None,
    cluster_file: Annotated[
        Path | None,
        typer.Option("--cluster", help="cluster.yaml: names the node and its GPU type."),
    ] = None,
    out: OutOpt = Path("profiles"),
    node: NodeOpt = None,
    device: Annotated[
        str | None,
        typer.Option(
            "--device", help="cuda | cpu; default: cuda when NVML (or nvidia-smi) sees a GPU."
        ),
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer, shorter points.")] = False,
    max_model_len: Annotated[
        int | None, typer.Option("--max-model-len", help="Default: each model's max_context.")
    ] = None,
    kv_gib: Annotated[
        float, typer.Option("--kv-gib", help="CPU build: KV cache GiB (VLLM_CPU_KVCACHE_SPACE).")
    ] = 1.0,
    enforce_eager: Annotated[
        bool, typer.Option("--enforce-eager", help="No graph capture: faster start.")
    ] = False,
    port: Annotated[
        int | None, typer.Option("--port", help="Server port; default: a free one per run.")
    ] = None,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Run again what failed before.")
    ] = False,
    timeout_s: Annotated[
        float, typer.Option("--start-timeout", help="Spawn -> ready limit, s.")
    ] = 900.0,
    ray: Annotated[
        bool,
        typer.Option("--ray", help="Run on every node of --cluster through Ray (RAY_ADDRESS)."),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Start real vLLM servers: cold start, prefill latency, TPOT vs concurrency, KV capacity, sleep/wake."""
    from planner.app.profile import (
        EngineProfile,
        EngineProfileRequest,
        ProfileHooks,
        profile_engine,
    )

    req = EngineProfileRequest(
        models_file=models_file,
        model=model,
        variant=variant,
        tp=tp,
        cluster_file=cluster_file,
        out=out,
        node=node,
        device=device,
        quick=quick,
        max_model_len=max_model_len,
        kv_gib=kv_gib,
        enforce_eager=enforce_eager,
        port=port,
        retry_failed=retry_failed,
        start_timeout_s=timeout_s,
        ray=ray,
    )
    hooks = ProfileHooks(
        planned=show_planned,
        running=steps_bar,
        busy=lambda title: err_console.status(title),
        warn=lambda w: err_console.print(f"[yellow]warning:[/] {w}"),
    )
    done = profile_engine(req, hooks)
    if isinstance(done, EngineProfile):
        show_profile(done, json_out)
    else:
        show_ray_profile(done, json_out)
