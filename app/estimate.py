"""The `estimate` service: memory, latency and switch costs of one model on one GPU type,
for one scenario or a CSV batch of them, each checked (an InputError names the flag or the
column), with a profile's calibration laid on where one is given."""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.catalog.gpus import GpuSpec
    from planner.catalog.models import ModelArch
    from planner.engines.base import EntryPoint
    from planner.optimizer.perf.calib import Calib
    from planner.schemas.plan import CalibrationRef

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


@dataclass(frozen=True)
class Scenario:
    """One scenario as given: flags (typed) or a CSV row (text, an empty cell its default);
    `estimate` checks each field."""

    model: str | None = None
    gpu: str | None = None
    tp: int | str = 1
    quantization: str = "bf16"
    kv_cache_dtype: str = "auto"
    input_len: int | str = 1024
    output_len: int | str = 256
    concurrency: int | str = 1
    interconnect: str | None = None


@dataclass(frozen=True)
class EngineSettings:
    """The engine flags an estimate runs with (None: vLLM's default for the GPU)."""

    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    entry_point: EntryPoint = "serve"  # checked by `estimate` (the flag is any text)


@dataclass(frozen=True)
class Estimate:
    """One scenario's figures, in the order of `planner estimate --json`'s keys."""

    model: str
    gpu: str
    tp: int
    quantization: str
    interconnect: str
    input_len: int
    output_len: int
    concurrency: int
    fits: bool
    weights_gib_per_gpu: float
    kv_bytes_per_token: float
    max_kv_tokens: int
    # what the engine runs with: the flags given, else vLLM's defaults for this GPU
    max_num_seqs: int
    max_num_batched_tokens: int
    # the shares of requests sent in the first round, all clients at once, and of the
    # rest still in its order (closedloop.py)
    burst_share: float
    chain_share: float
    ttft_s: float | None  # None: does not fit
    tpot_s: float | None
    output_tokens_per_s: float
    # which kernel layer gave the linear layers' rate: measured, interpolated, roofline
    source: str
    cold_start_s: float
    wake_host_s: float
    wake_disk_s: float
    # per figure: calibrated or not, and from which runs (the profile's calibration)
    calibration: dict[str, dict[str, object]]

    def to_json(self) -> dict[str, object]:
        # shallow: `asdict` would deep-copy every row's calibration (a batch has thousands)
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def estimate(
    scenarios: Sequence[Scenario] | Path,
    engine: EngineSettings,
    profiles: Path | None = None,
    warn: Callable[[str], None] = lambda _: None,
) -> list[Estimate]:
    """The estimates of `scenarios` (a Path: a CSV batch, columns named like the flags) on
    `engine`, calibrated by the profiles under `profiles`; `warn` hears the profiles' warnings."""
    from planner.app.inputs import calibration, calibration_refs

    check_entry_point(engine.entry_point)
    calibs, warnings = calibration(profiles)
    for w in warnings:
        warn(w)
    refs = calibration_refs(profiles)
    if isinstance(scenarios, Path):
        rows = read_batch(scenarios)
        return [
            estimate_one(r, calibs, (str(scenarios), f"row {i + 1}."), engine, refs)
            for i, r in enumerate(rows)
        ]
    for s in scenarios:
        if s.model is None or s.gpu is None:
            raise InputError(
                "--model and --gpu are required (or --batch FILE)",
                path="--model" if s.model is None else "--gpu",
                fix="e.g. `planner estimate --model Llama-3.1-8B-Instruct --gpu L40S`",
            )
    return [estimate_one(s, calibs, (None, ""), engine, refs) for s in scenarios]


def default_interconnect(gpu: GpuSpec) -> str:
    """NVLink between the GPUs of SXM boards (the switch joins them all), else PCIe."""
    return "nvlink" if gpu.nvlink_gbps and "SXM" in gpu.name.upper() else "pcie"


@lru_cache(maxsize=1024)
def _arch(spec: str) -> ModelArch:
    from planner.catalog.models import resolve_arch

    return resolve_arch(spec)


def estimate_one(
    sc: Scenario,
    calibs: dict[str, Calib],
    where: tuple[str | None, str],
    engine: EngineSettings,
    refs: dict[str, CalibrationRef],
) -> Estimate:
    """One scenario's estimate. `where` = (file, path prefix) for its errors; `calibs`: GPU
    type -> Calib; `refs`: GPU type -> what its calibration came from (`calibration_refs`)."""
    from planner.optimizer.perf import BURST_SHARE, CHAIN_SHARE, benchmark_loop, instance_perf

    arch, gpu, q, kvd, nums, link = _check(sc, where)
    perf = instance_perf(
        arch,
        q,
        gpu,
        nums["tp"],
        kv_cache_dtype=kvd,
        interconnect=link,
        calib=calibs.get(gpu.name),
        max_model_len=engine.max_model_len,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        entry_point=engine.entry_point,
    )
    # clients at fixed lengths, as a serving benchmark runs them: partly in step
    loop = benchmark_loop(perf, nums["input_len"], nums["output_len"], nums["concurrency"])

    def fin(x: float) -> float | None:
        return round(x, 6) if math.isfinite(x) else None

    return Estimate(
        model=arch.name,
        gpu=gpu.name,
        tp=nums["tp"],
        quantization=q,
        interconnect=link,
        input_len=nums["input_len"],
        output_len=nums["output_len"],
        concurrency=nums["concurrency"],
        fits=perf.fits,
        weights_gib_per_gpu=round(perf.weights_gib_per_gpu, 4),
        kv_bytes_per_token=perf.kv_bytes_per_token,
        max_kv_tokens=perf.max_kv_tokens,
        max_num_seqs=perf.max_num_seqs,
        max_num_batched_tokens=perf.chunk_tokens,
        burst_share=BURST_SHARE,
        chain_share=CHAIN_SHARE,
        ttft_s=fin(loop.ttft_s),
        tpot_s=fin(loop.tpot_s),
        output_tokens_per_s=round(loop.tokens_per_s, 3),
        source=perf.step.kernel_source,
        cold_start_s=round(perf.cold_start_s, 3),
        wake_host_s=round(perf.wake_host_s, 3),
        wake_disk_s=round(perf.wake_disk_s, 3),
        calibration=_figure_sources(refs.get(gpu.name), arch.name),
    )


def _figure_sources(ref: CalibrationRef | None, model: str) -> dict[str, dict[str, object]]:
    from planner.optimizer.perf.calib import figure_sources

    if ref is None:
        return figure_sources([], "", [], None)
    return figure_sources(ref.fields, ref.source, ref.runs, ref.models.get(model))


def _check(
    sc: Scenario, where: tuple[str | None, str]
) -> tuple[ModelArch, GpuSpec, str, str, dict[str, int], str]:
    """(arch, GPU, quantization, KV dtype, {tp, input_len, output_len, concurrency},
    interconnect) of one scenario, each checked; an InputError names the flag or column."""
    from planner.catalog.gpus import resolve_gpu
    from planner.optimizer.perf.memory import KV_DTYPES, WEIGHT_QUANTS
    from planner.schemas import check_tp

    file, pre = where

    def f(name: str) -> str:
        return f"{pre}{name}" if pre else f"--{name.replace('_', '-')}"

    try:
        arch = _arch(str(sc.model))
    except ValueError as e:
        raise InputError(
            str(e),
            file=file,
            path=f("model"),
            fix="use a name from `planner catalog models` or a config.json path",
        ) from None
    try:
        gpu = resolve_gpu(str(sc.gpu))
    except ValueError as e:
        raise InputError(
            str(e), file=file, path=f("gpu"), fix="use a name from `planner catalog gpus`"
        ) from None
    q, kvd = str(sc.quantization), str(sc.kv_cache_dtype)
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
    for k in ("tp", "input_len", "output_len", "concurrency"):
        nums[k] = _whole(getattr(sc, k), file, f(k))
    check_tp(arch.num_attention_heads, arch.num_kv_heads, nums["tp"], file, f("tp"))
    link = sc.interconnect or default_interconnect(gpu)
    if link not in ("pcie", "nvlink"):
        raise InputError(
            f"unknown interconnect {link!r}",
            file=file,
            path=f("interconnect"),
            fix="use pcie or nvlink",
        )
    return arch, gpu, q, kvd, nums, link


def _whole(value: int | str, file: str | None, path: str, lo: int = 1) -> int:
    """`value` as a whole number >= `lo`; an InputError at `path` otherwise."""
    try:
        n = int(value)  # a flag's int or a CSV cell's text
    except (TypeError, ValueError):
        raise InputError(
            f"{value!r} is not an integer", file=file, path=path, fix="give a whole number"
        ) from None
    if n < lo:
        raise InputError(f"{n} is below {lo}", file=file, path=path, fix=f"use a value >= {lo}")
    return n


def read_batch(path: Path) -> list[Scenario]:
    """The scenarios of a CSV batch (a header of `_COLUMNS` names; model and gpu required)."""
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
    # an empty cell takes the flag's default (the Scenario's)
    return [Scenario(**{k: v for k, v in r.items() if k in _COLUMNS and v}) for r in reader]


def check_entry_point(entry_point: str) -> None:
    """`--entry-point` names one vLLM has."""
    from planner.engines.base import ENTRY_POINTS

    if entry_point not in ENTRY_POINTS:
        raise InputError(
            f"unknown entry point {entry_point!r}",
            path="--entry-point",
            fix=f"use one of {list(ENTRY_POINTS)}",
        )
