"""`planner profile hardware`: torch microbenchmarks of one device of each GPU type.

Measured per device: dense GEMM rate (bf16/fp16, fp8 through `torch._scaled_mm` on
compute capability >= 8.9; bf16/fp32 on the CPU) over a few shapes, device memory copy,
host<->device copies (pinned and pageable), and for the node: cold disk read and RAM copy.
Each figure is a median over repetitions after warm-ups, with its p90-p10 spread.

The work is a list of `Step`s (label + a function returning one measurement) so the CLI can
draw a progress bar; `assemble` turns the measurements into the profile's `Hardware`.
Which devices a node's profile measures, and the run over them: hardware_targets.py.
On CUDA, kernels are timed with CUDA events (`stats.CudaEventTimer`), which synchronize.
torch and numpy are imported inside the functions (`planner --help` stays light).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import ProfileError
from planner.profiler.devices import fs_type
from planner.profiler.stats import (
    CudaEventTimer,
    Timer,
    WallTimer,
    inner_iterations,
    rate_stat,
    time_repeated,
)
from planner.schemas.profile import GemmPoint, Hardware, Stat
from planner.units import GB, MIB, TFLOPS


@dataclass(frozen=True)
class HwConfig:
    """Sizes and repetitions of one hardware profile."""

    device: str  # "cuda" | "cpu"
    gemm_shapes: tuple[tuple[int, int, int], ...]  # (m, n, k)
    gemm_dtypes: tuple[str, ...]  # bf16 | fp16 | fp8 | fp32
    copy_bytes: int  # device memory copy size, bytes
    h2d_bytes: int  # host<->device copy size, bytes
    disk_bytes: int  # temp file size for the disk read, bytes
    ram_bytes: int  # RAM copy size, bytes
    warmup: int = 2  # untimed calls before timing
    reps: int = 7  # timed repetitions
    target_s: float = 0.05  # a repetition batches calls until it lasts about this long


def plan_config(device: str, *, quick: bool = False, fp8: bool = False) -> HwConfig:
    """The default sizes for `device`; `quick` shrinks them (tests, a first look)."""
    if device == "cuda":
        shapes = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 4096))
        if quick:
            shapes = ((2048, 2048, 2048), (4096, 4096, 4096))
        dtypes = ("bf16", "fp16", "fp8") if fp8 else ("bf16", "fp16")
        return HwConfig(
            device="cuda",
            gemm_shapes=shapes,
            gemm_dtypes=dtypes,
            copy_bytes=(256 if quick else 2048) * MIB,  # large enough to leave every cache
            h2d_bytes=(256 if quick else 1024) * MIB,
            disk_bytes=(256 if quick else 2048) * MIB,
            ram_bytes=(256 if quick else 1024) * MIB,
            reps=5 if quick else 10,
        )
    if device == "cpu":
        shapes = ((256, 256, 256), (512, 512, 512))
        if not quick:
            shapes = (*shapes, (1024, 1024, 1024), (2048, 2048, 2048))
        return HwConfig(
            device="cpu",
            gemm_shapes=shapes,
            gemm_dtypes=("bf16", "fp32"),
            copy_bytes=(32 if quick else 256) * MIB,
            h2d_bytes=0,  # no host link on the CPU device
            disk_bytes=(32 if quick else 512) * MIB,
            ram_bytes=(32 if quick else 256) * MIB,
            warmup=1 if quick else 2,
            reps=3 if quick else 7,
            target_s=0.02 if quick else 0.05,
        )
    raise ProfileError(f"unknown device {device!r}", fix="use --device cuda or --device cpu")


def gemm_flops(m: int, n: int, k: int) -> float:
    """FLOPs of one dense GEMM: a multiply and an add per (m, n, k)."""
    return 2.0 * m * n * k


# A measurement: (Hardware field, key inside it or the GEMM shape/dtype, the Stat).
Measurement = tuple[str, Any, Stat]


@dataclass
class Step:
    """One microbenchmark: a label for the progress bar and the function that runs it."""

    label: str
    run: Callable[[], Measurement]
    weight: float = 1.0  # relative duration, for the progress bar's ETA


@dataclass
class HwRun:
    """The steps of one device plus notes gathered while planning them."""

    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def assemble(measurements: list[Measurement], notes: list[str] | None = None) -> Hardware:
    """The profile's `Hardware` from measurements; per dtype the best shape's rate is the rate."""
    hw = Hardware(notes=list(notes or []))
    points: list[GemmPoint] = []
    for fieldname, key, stat in measurements:
        if fieldname == "gemm":
            dtype, (m, n, k) = key
            points.append(GemmPoint(dtype=dtype, m=m, n=n, k=k, tflops=stat))
        else:
            setattr(hw, fieldname, stat)
    best: dict[str, Stat] = {}
    for p in points:
        if p.dtype not in best or p.tflops.median > best[p.dtype].median:
            best[p.dtype] = p.tflops
    hw.gemm_points = points
    hw.gemm_tflops = best
    return hw


def fp8_supported(torch: Any) -> bool:
    """fp8 GEMMs need `torch._scaled_mm` and compute capability >= 8.9 (Ada, Hopper, later)."""
    if not (torch.cuda.is_available() and hasattr(torch, "_scaled_mm")):
        return False
    if not hasattr(torch, "float8_e4m3fn"):
        return False
    return tuple(torch.cuda.get_device_capability()) >= (8, 9)


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def make_gemm(torch: Any, device: str, dtype: str, m: int, n: int, k: int) -> Callable[[], object]:
    """A closure computing one (m, k) x (k, n) GEMM on `device` in `dtype`."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    if dtype == "fp8":
        # _scaled_mm wants A row-major and B column-major, fp8 e4m3, fp32 scalar scales.
        a = torch.randn(m, k, generator=gen).to(device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, generator=gen).to(device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    dt = _torch_dtype(torch, dtype)
    a = torch.randn(m, k, generator=gen).to(device=device, dtype=dt)
    b = torch.randn(k, n, generator=gen).to(device=device, dtype=dt)
    out = torch.empty(m, n, device=device, dtype=dt)
    return lambda: torch.matmul(a, b, out=out)


def _timed_rate(
    fn: Callable[[], object],
    timer: Timer,
    cfg: HwConfig,
    work: float,
    unit: float,
    before: Callable[[], object] | None = None,
) -> Stat:
    """Warm up, size the inner batch from one timed call, repeat; a rate Stat of `work/unit`."""
    first = time_repeated(fn, timer=timer, warmup=cfg.warmup, reps=1)[0]
    inner = inner_iterations(first, cfg.target_s)
    times = time_repeated(fn, timer=timer, warmup=0, reps=cfg.reps, inner=inner, before=before)
    return rate_stat(times, work, unit)


def gemm_step(
    torch: Any, cfg: HwConfig, dtype: str, shape: tuple[int, int, int], timer: Timer
) -> Step:
    """Step measuring one GEMM shape in one dtype, TFLOP/s."""
    m, n, k = shape

    def run() -> Measurement:
        fn = make_gemm(torch, cfg.device, dtype, m, n, k)
        return "gemm", (dtype, shape), _timed_rate(fn, timer, cfg, gemm_flops(m, n, k), TFLOPS)

    return Step(f"GEMM {dtype} {m}x{n}x{k}", run, weight=2.0)


def device_copy_step(torch: Any, cfg: HwConfig, timer: Timer) -> Step:
    """Step measuring a device-to-device copy, GB/s counting bytes read plus bytes written."""

    def run() -> Measurement:
        src = torch.empty(cfg.copy_bytes, dtype=torch.uint8, device=cfg.device).fill_(1)
        dst = torch.empty_like(src)
        stat = _timed_rate(lambda: dst.copy_(src), timer, cfg, 2.0 * cfg.copy_bytes, GB)
        return "device_copy_gbps", None, stat

    return Step("device memory copy", run)


def host_link_steps(torch: Any, cfg: HwConfig, timer: Timer) -> list[Step]:
    """Steps measuring host->device (pinned, pageable) and device->host (pinned), GB/s."""
    n = cfg.h2d_bytes

    def h2d(pinned: bool) -> Measurement:
        host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned).fill_(1)
        dev = torch.empty(n, dtype=torch.uint8, device=cfg.device)
        stat = _timed_rate(lambda: dev.copy_(host, non_blocking=pinned), timer, cfg, n, GB)
        return ("h2d_pinned_gbps" if pinned else "h2d_pageable_gbps"), None, stat

    def d2h() -> Measurement:
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(n, dtype=torch.uint8, device=cfg.device).fill_(1)
        stat = _timed_rate(lambda: host.copy_(dev, non_blocking=True), timer, cfg, n, GB)
        return "d2h_pinned_gbps", None, stat

    return [
        Step("host->device pinned", lambda: h2d(True)),
        Step("host->device pageable", lambda: h2d(False)),
        Step("device->host pinned", d2h),
    ]


def ram_step(cfg: HwConfig) -> Step:
    """Step measuring a host RAM copy with numpy, GB/s counting read plus written bytes."""

    def run() -> Measurement:
        import numpy as np

        src = np.ones(cfg.ram_bytes, dtype=np.uint8)
        dst = np.empty_like(src)
        stat = _timed_rate(lambda: np.copyto(dst, src), WallTimer(), cfg, 2.0 * cfg.ram_bytes, GB)
        return "ram_gbps", None, stat

    return Step("RAM copy", run)


def drop_file_cache(fd: int) -> None:
    """Evict a file's pages from the page cache: flush dirty pages, then DONTNEED them.

    Only clean pages can be dropped, hence the fsync first.
    """
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def write_test_file(path: Path, nbytes: int, chunk: int = 8 * MIB) -> None:
    """Write `nbytes` of seeded pseudo-random bytes (incompressible) and fsync."""
    import numpy as np

    block = np.random.default_rng(0).integers(0, 256, size=chunk, dtype=np.uint8).tobytes()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            f.write(block[: min(chunk, left)])
            left -= min(chunk, left)
        f.flush()
        os.fsync(f.fileno())


def read_file_cold(path: Path, chunk: int = 16 * MIB) -> int:
    """Drop the file from the page cache, then read it sequentially; bytes read."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        drop_file_cache(fd)
        while True:
            got = os.readv(fd, [view])
            if got <= 0:
                break
            total += got
    finally:
        os.close(fd)
    return total


def disk_step(cfg: HwConfig, disk_dir: Path, notes: list[str]) -> Step:
    """Step measuring a cold sequential read of a temp file in `disk_dir`, GB/s."""
    kind = fs_type(disk_dir)
    if kind in ("tmpfs", "ramfs"):
        notes.append(f"disk read measured on {kind} ({disk_dir}): that is RAM, not a disk")

    def run() -> Measurement:
        disk_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".planner-disk-", suffix=".bin", dir=disk_dir)
        os.close(fd)
        path = Path(name)
        try:
            write_test_file(path, cfg.disk_bytes)
            wall = WallTimer()
            times = time_repeated(
                lambda: read_file_cold(path), timer=wall, warmup=0, reps=max(3, cfg.reps // 2)
            )
        finally:
            path.unlink(missing_ok=True)
        return "disk_read_gbps", None, rate_stat(times, cfg.disk_bytes, GB)

    return Step(f"disk read ({disk_dir})", run, weight=3.0)


def plan_steps(
    torch: Any, cfg: HwConfig, *, disk_dir: Path | None, node_steps: bool = True
) -> HwRun:
    """Every step of one device's profile; `node_steps` adds disk and RAM (once per node)."""
    out = HwRun()
    timer: Timer = CudaEventTimer(torch) if cfg.device == "cuda" else WallTimer()
    for dtype in cfg.gemm_dtypes:
        for shape in cfg.gemm_shapes:
            out.steps.append(gemm_step(torch, cfg, dtype, shape, timer))
    out.steps.append(device_copy_step(torch, cfg, timer))
    if cfg.device == "cuda" and cfg.h2d_bytes > 0:
        out.steps.extend(host_link_steps(torch, cfg, timer))
    if node_steps:
        if disk_dir is not None and cfg.disk_bytes > 0:
            out.steps.append(disk_step(cfg, disk_dir, out.notes))
        out.steps.append(ram_step(cfg))
    return out


def run_steps(run: HwRun, on_step: Callable[[Step], None] | None = None) -> Hardware:
    """Run the steps in order (calling `on_step` after each) and assemble the result."""
    got: list[Measurement] = []
    for step in run.steps:
        got.append(step.run())
        if on_step is not None:
            on_step(step)
    return assemble(got, run.notes)
