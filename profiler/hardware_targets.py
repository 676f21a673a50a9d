"""`planner profile hardware` on one node: which devices to measure (one per GPU type, or the
CPU), each measured with hardware.py's steps into one Profile; device names to catalog types.
torch is imported inside the functions (`planner --help` stays light).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import ProfileError
from planner.gpu_discovery import gpu_type_from_name
from planner.profiler.hardware import (
    HwConfig,
    HwRun,
    Step,
    fp8_supported,
    plan_config,
    plan_steps,
    run_steps,
)
from planner.schemas.profile import Hardware, Profile


@dataclass(frozen=True)
class Target:
    """The device profiled for one GPU type: its torch index (None on the CPU) and name."""

    gpu_type: str  # catalog type; the sanitized device name when the catalog lacks it
    index: int | None
    name: str


def cpu_name() -> str:
    """The CPU model name from /proc/cpuinfo ("" if unreadable)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def type_for(name: str, memory_gib: float | None) -> str:
    """Catalog type of a device name, or a file-name-safe form of the name itself."""
    found = gpu_type_from_name(name, memory_gib)
    if found:
        return found
    return "".join(c if c.isalnum() else "-" for c in name).strip("-") or "unknown-gpu"


def targets(torch: Any, device: str) -> list[Target]:
    """One device per distinct GPU type (the lowest index), or the CPU."""
    if device == "cpu":
        return [Target("cpu", None, cpu_name())]
    if not torch.cuda.is_available():
        raise ProfileError(
            "no CUDA device is visible to torch",
            fix="run on a GPU node with a CUDA build of torch, or use --device cpu",
        )
    out: list[Target] = []
    for i in range(torch.cuda.device_count()):
        name = torch.cuda.get_device_name(i)
        mem_gib = torch.cuda.get_device_properties(i).total_memory / 1024**3
        t = type_for(name, mem_gib)
        if all(x.gpu_type != t for x in out):
            out.append(Target(t, i, name))
    return out


def measure_target(
    torch: Any,
    target: Target,
    cfg: HwConfig,
    *,
    disk_dir: Path | None,
    node_steps: bool,
    on_plan: Callable[[HwRun], None] | None = None,
    on_step: Callable[[Step], None] | None = None,
) -> Hardware:
    """Plan and run every step of `target` (on its CUDA device); `on_plan` sees the plan first."""

    def go() -> Hardware:
        run = plan_steps(torch, cfg, disk_dir=disk_dir, node_steps=node_steps)
        if on_plan is not None:
            on_plan(run)
        return run_steps(run, on_step)

    if target.index is None:
        return go()
    with torch.cuda.device(target.index):
        return go()


# Callbacks of one target's progress: (on_plan, on_step).
Callbacks = tuple[Callable[[HwRun], None] | None, Callable[[Step], None] | None]


def profile_hardware(
    device: str,
    node: str,
    *,
    quick: bool = False,
    disk_dir: Path | None = None,
    on_target: Callable[[Target], Callbacks] | None = None,
) -> list[Profile]:
    """Measure one device of every GPU type on this node (or the CPU): one Profile each.

    Disk and RAM belong to the node: they are measured once, with the first target.
    """
    import torch

    from planner.gpu_discovery import GpuDiscovery, discover_gpus
    from planner.profiler import store

    found = discover_gpus() if device == "cuda" else GpuDiscovery()
    driver, cuda = found.driver, found.cuda
    out: list[Profile] = []
    for i, target in enumerate(targets(torch, device)):
        fp8 = False
        if device == "cuda":
            with torch.cuda.device(target.index):
                fp8 = fp8_supported(torch)
        cfg = plan_config(device, quick=quick, fp8=fp8)
        on_plan, on_step = on_target(target) if on_target is not None else (None, None)
        hw = measure_target(
            torch,
            target,
            cfg,
            disk_dir=disk_dir,
            node_steps=(i == 0),
            on_plan=on_plan,
            on_step=on_step,
        )
        env = store.environment(target.name, driver=driver, cuda=cuda or (torch.version.cuda or ""))
        out.append(Profile(node=node, gpu_type=target.gpu_type, hardware=hw, environment=env))
    return out
