"""`planner profile engine`: measure real vLLM servers, one (model, variant, TP) at a time.

For each run: cold start (spawn -> `/v1/models` ready, split into weight load and engine
init from the server log), prefill latency vs prompt length (streamed time to the first token), TPOT vs
concurrency (streamed completions that all start together), the KV capacity the engine
reports, and on CUDA the sleep/wake times of levels 1 and 2 (vLLM: `POST /sleep?level=N`,
`POST /wake_up`, and for level 2 the engine's `reload_request`, vLLM's `POST /collective_rpc
{"method": "reload_weights"}`:
the dev endpoints `VLLM_SERVER_DEV_MODE=1` exposes).

Prompts are token-id lists (the completions API takes them), so a point has exactly the
prompt length it claims, whatever the tokenizer; each repetition draws fresh ids so the
prefix cache never serves a repetition. `ignore_eos` makes every stream exactly
`max_tokens` long. A server that does not start becomes a `failed` run with the launcher's
classified reason, and the next run goes on. Launching goes through `planner.engines`.

One module per job: engine_runs.py (which runs, their settings), engine_client.py (the HTTP
side), engine_measure.py (the measurements); this module runs them, one server at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from planner.engines.process import free_port
from planner.errors import LaunchError
from planner.profiler.engine_client import (
    Client,
    prompt_ids,
    vocab_size_of,
)
from planner.profiler.engine_measure import (
    measure_decode,
    measure_idle,
    measure_prefill,
    measure_sleep,
)
from planner.profiler.engine_runs import (
    BenchConfig,
    RunSpec,
    fit_to_context,
    instance_for,
    plan_runs,
    precheck_path,
)
from planner.schemas.profile import EngineRun

if TYPE_CHECKING:
    from planner.engines.base import Engine

# ---------------------------------------------------------------- one run


@dataclass
class RunResult:
    """An engine run and where its server log is."""

    run: EngineRun
    log_path: Path
    steps: list[str] = field(default_factory=list)


def base_run(spec: RunSpec, cfg: BenchConfig) -> EngineRun:
    """The run record before any measurement: identity and engine settings."""
    inst_mml = cfg.max_model_len or spec.model.max_context
    return EngineRun(
        model=spec.model.name,
        variant=spec.variant.name,
        tp=spec.tp,
        quantization=spec.variant.quantization,
        arch=spec.model.arch,
        max_model_len=inst_mml,
        max_num_seqs=cfg.max_num_seqs,
    )


def profile_run(
    spec: RunSpec,
    cfg: BenchConfig,
    *,
    log_dir: Path,
    port: int | None = None,
    tick: Callable[[str], None] = lambda _label: None,
) -> RunResult:
    """Start a server for `spec`, measure it, stop it; a failed start becomes a failed run."""
    from planner.engines import process
    from planner.engines.base import get_engine

    run = base_run(spec, cfg)
    cfg = fit_to_context(cfg, run.max_model_len or spec.model.max_context)
    log_path = log_dir / f"{spec.model.name}-{spec.variant.name}-tp{spec.tp}.log"
    model_path = spec.path or spec.variant.path
    bad = precheck_path(model_path)
    if bad is not None:
        run.status = "failed"
        run.reason = "bad_model_path"
        run.detail = bad
        return RunResult(run, log_path)
    port = port or free_port()
    inst = instance_for(spec, cfg, port)
    engine = get_engine(inst.engine.kind)
    secret = process.new_secret()  # the profiled server answers only this run
    argv, env = engine.build_argv(
        inst,
        model_path=model_path,
        served_name=spec.model.name,
        device="cuda" if cfg.device == "cuda" else "cpu",
        secret=secret,
    )
    log_path.unlink(missing_ok=True)  # start-up timings are read from this run's log only
    t0 = time.monotonic()
    proc = process.start_server(argv, env, log_path)
    client = None
    try:
        try:
            process.wait_ready(
                engine, "127.0.0.1", port, proc, log_path, cfg.start_timeout_s, secret=secret
            )
        except LaunchError as e:
            run.status, run.reason = "failed", e.reason
            run.detail = (e.log_tail or "")[-4000:]
            return RunResult(run, log_path)
        run.cold_start_s = time.monotonic() - t0
        log = process.read_tail(log_path, max_bytes=4_000_000)
        timings = engine.parse_startup_log(log)
        run.weight_load_s = timings.get("weight_load_s")
        run.engine_init_s = timings.get("engine_init_s")
        run.kv_capacity_tokens = engine.kv_capacity_tokens(log)
        tick("start")
        client = Client(
            port,
            spec.model.name,
            cfg.request_timeout_s,
            secret=secret,
            engine=engine,
        )
        if run.kv_capacity_tokens is None:
            run.kv_capacity_tokens = engine.kv_capacity_tokens("", client.metrics())
        vocab = vocab_size_of(model_path, spec.model.arch.vocab_size)
        try:
            _measure(client, run, cfg, engine, vocab, tick)
        except Exception as e:  # a request failed: keep what was measured, say why
            run.status, run.reason = "failed", "measurement_error"
            run.detail = f"{type(e).__name__}: {e}\n" + process.read_tail(log_path, 4000)[-3000:]
        return RunResult(run, log_path)
    finally:
        if client is not None:
            client.close()
        process.stop_server(proc)


def _measure(
    client: Client,
    run: EngineRun,
    cfg: BenchConfig,
    engine: Engine,
    vocab: int,
    tick: Callable[[str], None],
) -> None:
    """Warm the server up, then measure prefill, idle wake-ups, decode and (on a GPU, when
    asked) sleep and wake into `run`."""
    import numpy as np

    rng = np.random.default_rng(cfg.seed)
    # warm-up: the first plain and the first streamed request take slow first-use paths
    client.complete_s(prompt_ids(8, vocab, rng), max_tokens=4)
    client.streams([prompt_ids(8, vocab, rng)], 4)
    run.prefill = measure_prefill(client, cfg, vocab, rng, tick)
    run.prefill_idle_s = cfg.prefill_idle_s
    run.idle = measure_idle(client, cfg, vocab, rng, tick)
    run.decode = measure_decode(client, cfg, vocab, rng, tick, run.notes, run.prefill)
    if cfg.device == "cuda" and cfg.sleep:
        measure_sleep(client, run, engine)
        tick("sleep/wake")


# ---------------------------------------------------------------- one node (local or a Ray task)


# keyword-only options of `planner profile engine`, passed on to each node as data
def run_node(  # noqa: PLR0913
    models_data: dict,
    models_file: str,
    node: str,
    cfg_kwargs: dict,
    *,
    quick: bool = False,
    model: str | None = None,
    variant: str | None = None,
    tps: list[int] | None = None,
    skip: list[tuple[str, str, int]] | None = None,
    log_dir: str | None = None,
    device: str | None = None,
) -> dict:
    """Profile this node's engine runs, except the keys in `skip`; plain data back.

    What `planner profile engine --ray` runs on each node: the models file travels as data
    (`models_file` only resolves relative checkpoint paths, which must exist on the node).
    Returns {"gpu_type", "environment", "runs", "skipped"}.
    """
    import tempfile

    from planner.profiler import store
    from planner.profiler.devices import discover_node
    from planner.profiler.hardware_targets import type_for
    from planner.schemas import parse

    models = parse(models_data, "models", models_file)
    info = discover_node()
    dev = device or ("cuda" if info.gpus else "cpu")
    if dev == "cuda" and info.gpus:
        first = info.gpus[0]
        gpu_type = type_for(first.name, first.memory_gib)
        same = [g for g in info.gpus if g.gpu_type == first.gpu_type]
        devices = len(same)
        mem = min(g.memory_gib for g in same)
        name = first.name
    else:
        gpu_type = "cpu"
        devices = 1
        mem = info.ram_gib / 2
        name = "cpu"
    specs, skipped = plan_runs(
        models, devices=devices, memory_gib=mem, model=model, variant=variant, tps=tps
    )
    cfg = BenchConfig.for_device(dev, quick=quick, **cfg_kwargs)
    done = {tuple(k) for k in (skip or [])}
    logs = Path(log_dir or tempfile.mkdtemp(prefix=f"planner-profile-{node}-"))
    runs = [profile_run(s, cfg, log_dir=logs).run for s in specs if s.key not in done]
    env = store.environment(name, driver=info.driver, cuda=info.cuda)
    return {
        "gpu_type": gpu_type,
        "environment": env.model_dump(mode="json"),
        "runs": [r.model_dump(mode="json") for r in runs],
        "skipped": [[list(k), why] for k, why in skipped],
    }
