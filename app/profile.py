"""The profile service: `profile_engine` starts real vLLM servers one run at a time (here,
or on every node through Ray) and stores what they measured in the node's profile, saved
after every run (an interrupted profile resumes from there); `profile_hardware` runs the
torch microbenchmarks; `merge` combines nodes' profiles; `calibrate` fits the perf model's
factors into each profile; `check` compares measured GPUs with the catalog."""

from __future__ import annotations

import platform
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.optimizer.hwcheck import Check
    from planner.profiler.devices import NodeInfo
    from planner.profiler.engine_runs import BenchConfig, RunSpec
    from planner.profiler.hardware_targets import Callbacks, Target
    from planner.schemas.models import Models
    from planner.schemas.profile import Calibration, EngineRun, Environment, Profile

RunKey = tuple[str, str, int]  # (model, variant, TP)
Skipped = tuple[RunKey, str]  # a run this host cannot hold, and why
Step = Callable[[int, "str | None"], None]
OnTarget = Callable[
    ["Target"], "Callbacks"
]  # a GPU type's steps, as the profiler reports them  # (steps done since the last, what now; None: same)


@dataclass(frozen=True)
class EngineProfileRequest:
    """What `planner profile engine` was asked (the flags, parsed)."""

    models_file: Path
    model: str | None = None
    variant: str | None = None
    tp: list[int] | None = None  # TP degrees; None: the smallest that fits
    cluster_file: Path | None = None
    out: Path = Path("profiles")
    node: str | None = None
    device: str | None = None  # cuda | cpu; None: cuda when NVML sees a GPU
    quick: bool = False
    max_model_len: int | None = None
    kv_gib: float = 1.0
    enforce_eager: bool = False
    port: int | None = None
    retry_failed: bool = False
    start_timeout_s: float = 900.0
    ray: bool = False  # every node of `cluster_file` through Ray


def _no_steps(_total: int) -> AbstractContextManager[Step]:
    return nullcontext(lambda _n, _what: None)


@dataclass(frozen=True)
class ProfileHooks:
    """How a profile reports as it goes: `planned(skipped, done before)` before any run,
    `running(total steps)` wraps the runs and gives what hears each step, `busy(title)` wraps
    a node's runs through Ray, `warn` a line."""

    planned: Callable[[list[Skipped], list[RunKey]], None] = lambda _s, _d: None
    running: Callable[[int], AbstractContextManager[Step]] = _no_steps
    busy: Callable[[str], AbstractContextManager[object]] = lambda _: nullcontext()
    warn: Callable[[str], None] = lambda _: None


@dataclass(frozen=True)
class EngineProfile:
    """The profile file written, its new runs and the runs skipped (with why)."""

    path: Path
    runs: list[EngineRun] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "profile": str(self.path),
            "runs": [r.model_dump(mode="json", exclude_none=True) for r in self.runs],
            "skipped": [
                {"model": k[0], "variant": k[1], "tp": k[2], "why": w} for k, w in self.skipped
            ],
        }


@dataclass(frozen=True)
class RayEngineProfile:
    """The profile files written through Ray and each node's runs (as the node sent them)."""

    written: list[str]
    runs: list[dict[str, Any]]


def profile_engine(
    req: EngineProfileRequest, hooks: ProfileHooks | None = None
) -> EngineProfile | RayEngineProfile:
    """Start real vLLM servers: cold start, prefill latency, TPOT vs concurrency, KV
    capacity, sleep/wake; the pip extras they need are checked first."""
    from planner.app.backends import engine_modules, require_extra, serve_extra
    from planner.profiler import engine_runs as er
    from planner.profiler import store
    from planner.profiler.devices import discover_node
    from planner.schemas import load_models

    hooks = hooks or ProfileHooks()
    models = load_models(req.models_file)
    limits: dict[str, Any] = dict(
        max_model_len=req.max_model_len,
        kv_gib=req.kv_gib,
        enforce_eager=req.enforce_eager,
        start_timeout_s=req.start_timeout_s,
    )
    if req.ray:
        require_extra("cluster", "`planner profile engine --ray`")
        return _engine_ray(req, limits, hooks)
    out = req.out
    info = discover_node(disk_path=out.parent if out.parent.exists() else Path("."))
    dev = req.device or ("cuda" if info.gpus else "cpu")
    # the runs use the default engine kind (planner/engines/kinds.py)
    require_extra(serve_extra(dev), "`planner profile engine`", (*engine_modules(), "httpx"))
    node_name, gpu_type, devices, mem = _this_node(info, dev, req.node, req.cluster_file)
    runs, skipped = _plan_runs(
        models, req.models_file, devices, mem, req.model, req.variant, req.tp
    )
    cfg = er.BenchConfig.for_device(dev, quick=req.quick, **limits)
    prof = store.load_or_new(out, node_name, gpu_type)
    todo = [r for r in runs if not er.is_done(prof, r.key, retry_failed=req.retry_failed)]
    hooks.planned(skipped, [r.key for r in runs if r not in todo])
    device_name = info.gpus[0].name if info.gpus and dev == "cuda" else "cpu"

    def env() -> Environment:  # recorded when the first run is stored
        return store.environment(device_name, driver=info.driver, cuda=info.cuda)

    path = store.profile_path(out, node_name, gpu_type)
    results = _run_all(todo, cfg, out, req.port, (node_name, gpu_type), env, hooks.running)
    return EngineProfile(path, results, skipped)


def _plan_runs(
    models: Models,
    models_file: Path,
    devices: int,
    mem: float,
    model: str | None,
    variant: str | None,
    tp: list[int] | None,
) -> tuple[list[RunSpec], list[Skipped]]:
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
    info: NodeInfo, dev: str, node: str | None, cluster_file: Path | None
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
        gpu_type = "cpu"
        devices = 1
        mem = info.ram_gib / 2  # the KV cache and weights share RAM
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
    todo: list[RunSpec],
    cfg: BenchConfig,
    out: Path,
    port: int | None,
    where: tuple[str, str],
    env: Callable[[], Environment],
    running: Callable[[int], AbstractContextManager[Step]],
) -> list[EngineRun]:
    """Profile each run in turn; the profile file is saved after every run (resumable)."""
    from planner.profiler import engine_bench as eb
    from planner.profiler import engine_runs as er
    from planner.profiler import store

    node_name, gpu_type = where
    path = store.profile_path(out, node_name, gpu_type)
    results = []
    with running(max(1, len(todo) * er.steps_of(cfg))) as step:
        for spec in todo:
            label = f"{spec.model.name}/{spec.variant.name} tp={spec.tp}"
            step(0, f"{label}: starting")

            def tick(what: str, label: str = label) -> None:
                step(1, f"{label}: {what}")

            res = eb.profile_run(spec, cfg, log_dir=out / "logs", port=port, tick=tick)
            if res.run.status == "failed":
                step(max(0, er.steps_of(cfg) - 1), None)  # skip its remaining ticks
            prof = store.load_or_new(out, node_name, gpu_type)  # keep other writers' runs
            store.upsert_run(prof, res.run)
            if not prof.environment.created_at:
                prof.environment = env()
            store.save(prof, path)  # after every run: an interrupted profile resumes from here
            results.append(res.run)
    return results


def _engine_ray(
    req: EngineProfileRequest, cfg_kwargs: dict[str, Any], hooks: ProfileHooks
) -> RayEngineProfile:
    """`profile engine --ray`: each node of the cluster profiles its own engines; files land here."""
    from planner.io import read_yaml
    from planner.profiler import store
    from planner.profiler.remote import cluster_nodes, engine_on_node
    from planner.schemas import load_cluster
    from planner.schemas.profile import EngineRun, Environment

    names = cluster_nodes(req.cluster_file, req.node)
    assert req.cluster_file is not None  # cluster_nodes refuses none (InputError)
    cl = load_cluster(req.cluster_file)
    data = read_yaml(req.models_file)
    out = req.out
    written: list[str] = []
    all_runs: list[dict[str, Any]] = []
    for name in names:
        n = cl.node(name)
        gpu_type = n.gpus[0].spec.name if n.gpus else "cpu"
        prof = store.load_or_new(out, name, gpu_type)
        done = [r for r in prof.engine if r.status == "ok" or not req.retry_failed]
        skip = [list(store.run_key(r)) for r in done]
        with hooks.busy(f"profiling engines on {name} through Ray ..."):
            got = engine_on_node(
                name,
                models_data=data,
                models_file=str(req.models_file.resolve()),
                cfg_kwargs=cfg_kwargs,
                quick=req.quick,
                model=req.model,
                variant=req.variant,
                tps=req.tp,
                skip=skip,
                device=req.device,
            )
        if got["gpu_type"] != gpu_type:
            hooks.warn(f"{name} reports {got['gpu_type']}, cluster.yaml says {gpu_type}")
        prof = store.load_or_new(out, name, gpu_type)
        for r in got["runs"]:
            store.upsert_run(prof, EngineRun.model_validate(r))
            all_runs.append({"node": name, **r})
        prof.environment = Environment.model_validate(got["environment"])
        written.append(str(store.save(prof, store.profile_path(out, name, gpu_type))))
    return RayEngineProfile(written, all_runs)


@dataclass(frozen=True)
class HardwareRequest:
    """What `planner profile hardware` was asked (the flags, parsed)."""

    device: str | None = None  # cuda | cpu; None: cuda when NVML sees a GPU
    out: Path = Path("profiles")
    node: str | None = None
    quick: bool = False
    disk_dir: Path | None = None  # where the disk-read test file goes; None: `out`
    ray: bool = False  # every node of `cluster_file` through Ray
    cluster_file: Path | None = None


@dataclass(frozen=True)
class HardwareHooks:
    """How a hardware profile reports as it goes: `busy(title)` wraps the runs through Ray,
    `measuring()` wraps those here and gives what hears each GPU type's steps."""

    busy: Callable[[str], AbstractContextManager[object]] = lambda _: nullcontext()
    measuring: Callable[[], AbstractContextManager[OnTarget | None]] = nullcontext


def profile_hardware(
    req: HardwareRequest, hooks: HardwareHooks | None = None
) -> list[tuple[Profile, Path]]:
    """Torch microbenchmarks (GEMM TFLOP/s, memory copy, host<->device, disk and RAM GB/s),
    stored in each profile (its engine runs kept): the profiles and where each went."""
    from planner.app.backends import require_extra
    from planner.profiler import store
    from planner.profiler.hardware_targets import profile_hardware as measure

    hooks = hooks or HardwareHooks()
    dev = req.device or _default_device()
    if dev not in ("cuda", "cpu"):
        raise InputError(f"unknown device {dev!r}", path="--device", fix="use cuda or cpu")
    if req.ray:
        require_extra("cluster", "`planner profile hardware --ray`")
        from planner.profiler.remote import cluster_nodes, hardware_on_nodes

        nodes = cluster_nodes(req.cluster_file, req.node)
        with hooks.busy(f"profiling hardware on {len(nodes)} node(s) through Ray ..."):
            measured = hardware_on_nodes(nodes, dev, quick=req.quick)
    else:
        require_extra("profile", "`planner profile hardware`")
        with hooks.measuring() as on_target:
            measured = measure(
                dev,
                req.node or platform.node(),
                quick=req.quick,
                disk_dir=req.disk_dir or req.out,
                on_target=on_target,
            )
    out = []
    for m in measured:
        prof = store.load_or_new(req.out, m.node, m.gpu_type)  # keeps the file's engine runs
        prof.hardware, prof.environment = m.hardware, m.environment
        out.append((prof, store.save(prof, store.profile_path(req.out, m.node, m.gpu_type))))
    return out


def _default_device() -> str:
    from planner.gpu_discovery import discover_gpus

    return "cuda" if discover_gpus().gpus else "cpu"


def merge(sources: list[Path], out: Path) -> list[Path]:
    """Nodes' profiles combined into `out` (one file per node and GPU type): the files."""
    from planner.profiler import store

    merged = store.merge(store.load_profiles(list(sources)))
    return [store.save(p, store.profile_path(out, p.node, p.gpu_type)) for p in merged]


def calibrate(
    profiles: list[Path], warn: Callable[[str], None] = lambda _: None
) -> list[tuple[Path, Calibration]]:
    """Fit the perf model's efficiency and overhead factors from each profile's runs and
    write them into it: each profile and its calibration. A profile with no usable point
    is an InputError naming it; `warn` hears each profile's warnings."""
    from planner.catalog.gpus import resolve_gpu
    from planner.optimizer.perf.calib import default_calib
    from planner.optimizer.perf.calibration import calibrate as fit
    from planner.profiler import store
    from planner.schemas import load_profile

    out = []
    for path in store.profile_files(list(profiles)):
        prof = load_profile(path)
        try:
            gpu = resolve_gpu(prof.gpu_type)
        except ValueError as e:
            raise InputError(
                str(e),
                file=str(path),
                path="gpu_type",
                fix="profile a catalog GPU type, or add the type to the catalog",
            ) from None
        for w in store.warnings_here([prof]):
            warn(w)
        cal = fit(prof, gpu, default_calib(gpu.arch))
        if not cal.points and (prof.engine or cal.source == "defaults"):
            raise InputError(
                "no usable point to calibrate from"
                + "".join(f"\n  {e}" for e in cal.excluded or ["(no engine runs)"]),
                file=str(path),
                fix="import runs of a catalog model that fits this GPU (`planner profile "
                "import FILE --gpu TYPE --model NAME`), or run `planner profile engine`",
            )
        prof.calibration = cal
        store.save(prof, path)
        out.append((path, cal))
    return out


def check(profile_dir: Path) -> tuple[list[tuple[str, list[Check]]], list[str]]:
    """The measured GPUs of `profile_dir` against the catalog and the perf model: (checks
    per profiled catalog GPU type, problems)."""
    from planner.optimizer.hwcheck import check_profiles
    from planner.profiler import store

    profiles = store.load_profiles(sorted(Path(profile_dir).glob("*.yaml")))
    return check_profiles(profiles, str(profile_dir))


def import_runs(
    files: list[Path],
    gpu: str,
    *,
    node: str | None = None,
    out: Path = Path("profiles"),
    model: str | None = None,
    tp: int = 1,
    quantization: str | None = None,
    concurrency: int | None = None,
) -> tuple[Path, list[EngineRun]]:
    """Add measured serving runs (`vllm bench serve --save-result` JSON, or CSVs in the shared
    serving runs' layout) to the profile of one GPU type (`node`: default this host; a file
    imported again replaces its runs): the profile and the runs. A run the perf model cannot
    predict is kept, with why it calibrates nothing."""
    import socket

    from planner.catalog.gpus import resolve_gpu
    from planner.profiler import store
    from planner.profiler.serving_import import runs_from_serving_csv, runs_from_vllm_json

    try:
        gpu_type = resolve_gpu(gpu).name
    except ValueError as e:
        raise InputError(str(e), path="--gpu", fix="see `planner catalog gpus`") from None
    runs: list[EngineRun] = []
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
    # a run the perf model cannot predict is kept, and says why it calibrates nothing
    for r in runs:
        why = fit_reason(r, gpu_type)
        if why and not any(n.startswith("not calibrated:") for n in r.notes):
            r.notes.append(f"not calibrated: {why}")
    prof = store.load_or_new(out, node or socket.gethostname(), gpu_type)

    def key(r: EngineRun) -> tuple[str, int, str | None, str]:
        return (r.model, r.tp, r.quantization, r.notes[0] if r.notes else "")

    new = {key(r) for r in runs}
    prof.engine = [r for r in prof.engine if key(r) not in new] + runs  # a file again: replaced
    path = store.save(prof, store.profile_path(out, prof.node, gpu_type))
    return path, runs


def fit_reason(run: EngineRun, gpu_type: str) -> str:
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
