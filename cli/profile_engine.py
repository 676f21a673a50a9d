"""`planner profile engine`: real vLLM servers measured one run at a time (here, or on every
node through Ray), stored in the node's profile. Also the options and the progress bar the
profile commands share (cli/profile.py)."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import (
    JsonOpt,
    console,
    engine_modules,
    err_console,
    print_json,
    require_extra,
    serve_extra,
)
from planner.errors import InputError

OutOpt = Annotated[
    Path, typer.Option("-o", "--out", help="Profile directory (one YAML per node and GPU type).")
]
NodeOpt = Annotated[
    str | None,
    typer.Option("--node", help="Node name as in cluster.yaml; default: this host's name."),
]


def progress():
    """The progress bar of the profile commands (on stderr: stdout may carry JSON)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )


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
        str | None, typer.Option("--device", help="cuda | cpu; default: cuda when NVML sees a GPU.")
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
    from planner.profiler import engine_runs as er
    from planner.profiler import store
    from planner.profiler.devices import discover_node
    from planner.schemas import load_models

    models = load_models(models_file)
    limits: dict[str, Any] = dict(
        max_model_len=max_model_len, kv_gib=kv_gib, enforce_eager=enforce_eager,
        start_timeout_s=timeout_s,
    )  # fmt: skip
    if ray:
        require_extra("cluster", "`planner profile engine --ray`")
        _engine_ray(
            models_file, cluster_file, node, out, device, quick, model, variant, tp,
            retry_failed, limits, json_out,
        )  # fmt: skip
        return
    info = discover_node(disk_path=out.parent if out.parent.exists() else Path("."))
    dev = device or ("cuda" if info.gpus else "cpu")
    # the runs use the default engine kind (planner/engines/kinds.py)
    require_extra(serve_extra(dev), "`planner profile engine`", (*engine_modules(), "httpx"))
    node_name, gpu_type, devices, mem = _this_node(info, dev, node, cluster_file)
    runs, skipped = _plan_runs(models, models_file, devices, mem, model, variant, tp)
    cfg = er.BenchConfig.for_device(dev, quick=quick, **limits)
    prof = store.load_or_new(out, node_name, gpu_type)
    todo = [r for r in runs if not er.is_done(prof, r.key, retry_failed=retry_failed)]
    for key, why in skipped:
        err_console.print(f"[yellow]skip[/] {key[0]}/{key[1]} tp={key[2]}: {why}")
    for key in [r.key for r in runs if r not in todo]:
        err_console.print(f"[dim]already profiled[/] {key[0]}/{key[1]} tp={key[2]}")
    device_name = info.gpus[0].name if info.gpus and dev == "cuda" else "cpu"

    def env() -> Any:  # recorded when the first run is stored
        return store.environment(device_name, driver=info.driver, cuda=info.cuda)

    path = store.profile_path(out, node_name, gpu_type)
    results = _run_all(todo, cfg, out, port, (node_name, gpu_type), env)
    _report(results, skipped, path, json_out)


def _plan_runs(
    models: Any, models_file: Path, devices: int, mem: float, model: Any, variant: Any, tp: Any
) -> tuple[list, list]:
    """The runs this host can hold (and the skipped ones, with why); bad names exit 2."""
    from planner.profiler import engine_runs as er

    try:
        runs, skipped = er.plan_runs(
            models, devices=devices, memory_gib=mem, model=model, variant=variant, tps=tp
        )
    except KeyError:
        raise InputError(
            f"model {model!r} is not in the models file",
            file=str(models_file),
            path="--model",
            fix=f"use one of {models.names}",
        ) from None
    if variant is not None and not runs and not skipped:
        raise InputError(f"no variant {variant!r}", file=str(models_file), path="--variant")
    return runs, skipped


def _this_node(
    info: Any, dev: str, node: str | None, cluster_file: Path | None
) -> tuple[str, str, int, float]:
    """(node name, GPU type, devices of that type, GiB each) of the host being profiled."""
    from planner.schemas import load_cluster

    node_name = node or platform.node()
    if dev == "cuda":
        if not info.gpus:
            raise InputError("no NVIDIA GPU visible", path="--device", fix="use --device cpu")
        from planner.profiler.hardware_targets import type_for

        # as `profile hardware` names it
        gpu_type = type_for(info.gpus[0].name, info.gpus[0].memory_gib)
        same = [g for g in info.gpus if g.gpu_type == info.gpus[0].gpu_type]
        devices, mem = len(same), min(g.memory_gib for g in same)
    else:
        gpu_type, devices, mem = "cpu", 1, info.ram_gib / 2  # the KV cache and weights share RAM
    if cluster_file is None:
        return node_name, gpu_type, devices, mem
    cl = load_cluster(cluster_file)
    names = [x.name for x in cl.nodes]
    try:
        # --node, else the node named like this host, else the first node
        n = cl.node(node_name) if node or node_name in names else cl.nodes[0]
    except KeyError:
        raise InputError(
            f"node {node_name!r} is not in the cluster",
            file=str(cluster_file),
            path="nodes",
            fix=f"use --node with one of {names}",
        ) from None
    if n.gpus:
        gpu_type = n.gpus[0].spec.name
        devices = n.gpus[0].count if dev == "cuda" else 1
    return n.name, gpu_type, devices, mem


def _run_all(
    todo: list, cfg: Any, out: Path, port: int | None, where: tuple[str, str], env: Any
) -> list:
    """Profile each run in turn; the profile file is saved after every run (resumable)."""
    from planner.profiler import engine_bench as eb
    from planner.profiler import engine_runs as er
    from planner.profiler import store

    node_name, gpu_type = where
    path = store.profile_path(out, node_name, gpu_type)
    results = []
    with progress() as bar:
        task = bar.add_task("engine", total=max(1, len(todo) * er.steps_of(cfg)))
        for spec in todo:
            label = f"{spec.model.name}/{spec.variant.name} tp={spec.tp}"
            bar.update(task, description=f"{label}: starting")

            def tick(what: str, label=label) -> None:
                bar.update(task, advance=1, description=f"{label}: {what}")

            res = eb.profile_run(spec, cfg, log_dir=out / "logs", port=port, tick=tick)
            if res.run.status == "failed":
                bar.update(task, advance=max(0, er.steps_of(cfg) - 1))  # skip its remaining ticks
            prof = store.load_or_new(out, node_name, gpu_type)  # keep other writers' runs
            store.upsert_run(prof, res.run)
            if not prof.environment.created_at:
                prof.environment = env()
            store.save(prof, path)  # after every run: an interrupted profile resumes from here
            results.append(res.run)
    return results


def _report(results: list, skipped: list, path: Path, json_out: bool) -> None:
    if json_out:
        print_json(
            {
                "profile": str(path),
                "runs": [r.model_dump(mode="json", exclude_none=True) for r in results],
                "skipped": [
                    {"model": k[0], "variant": k[1], "tp": k[2], "why": w} for k, w in skipped
                ],
            }
        )
        return
    for r in results:
        if r.status == "ok":
            console.print(
                f"[green]ok[/] {r.model}/{r.variant} tp={r.tp}: cold start {r.cold_start_s:.1f} s "
                f"(weights {_f(r.weight_load_s)} s, engine init {_f(r.engine_init_s)} s), "
                f"KV {r.kv_capacity_tokens} tokens, {len(r.prefill)} prefill / {len(r.decode)} decode points"
            )
        else:
            console.print(f"[red]failed[/] {r.model}/{r.variant} tp={r.tp}: {r.reason}")
    console.print(f"wrote {path}")


def _engine_ray(
    models_file,
    cluster_file,
    node,
    out,
    device,
    quick,
    model,
    variant,
    tp,
    retry_failed,
    cfg_kwargs,
    json_out,
) -> None:
    """`profile engine --ray`: each node of the cluster profiles its own engines; files land here."""
    from planner.io import read_yaml
    from planner.profiler import store
    from planner.profiler.remote import cluster_nodes, engine_on_node
    from planner.schemas import load_cluster
    from planner.schemas.profile import EngineRun, Environment

    names = cluster_nodes(cluster_file, node)
    cl = load_cluster(cluster_file)
    data = read_yaml(models_file)
    written, all_runs = [], []
    for name in names:
        n = cl.node(name)
        gpu_type = n.gpus[0].spec.name if n.gpus else "cpu"
        prof = store.load_or_new(out, name, gpu_type)
        skip = [list(store.run_key(r)) for r in prof.engine if r.status == "ok" or not retry_failed]
        with err_console.status(f"profiling engines on {name} through Ray ..."):
            got = engine_on_node(
                name,
                models_data=data,
                models_file=str(models_file.resolve()),
                cfg_kwargs=cfg_kwargs,
                quick=quick,
                model=model,
                variant=variant,
                tps=tp,
                skip=skip,
                device=device,
            )
        if got["gpu_type"] != gpu_type:
            err_console.print(
                f"[yellow]warning:[/] {name} reports {got['gpu_type']}, cluster.yaml says {gpu_type}"
            )
        prof = store.load_or_new(out, name, gpu_type)
        for r in got["runs"]:
            store.upsert_run(prof, EngineRun.model_validate(r))
            all_runs.append({"node": name, **r})
        prof.environment = Environment.model_validate(got["environment"])
        written.append(str(store.save(prof, store.profile_path(out, name, gpu_type))))
    if json_out:
        print_json({"written": written, "runs": all_runs})
        return
    for r in all_runs:
        console.print(
            f"{r['node']}: {r['model']}/{r['variant']} tp={r['tp']}: {r['status']} {r['reason']}"
        )
    for p in written:
        console.print(f"wrote {p}")


def _f(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f}"
