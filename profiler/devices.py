"""What this node has: GPUs (through NVML), RAM and disk; the `cpu` device when no GPU answers.

NVML names (`nvmlDeviceGetName`) are mapped to catalog GPU types by `gpu_type_from_name`;
a name the catalog does not hold maps to None and the caller asks for an inline spec.
`pynvml` (distribution `nvidia-ml-py`) is imported inside `discover_gpus`, and tests pass a
fake module with the same functions.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.catalog.gpus import GPUS
from planner.units import GIB


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML reports it."""

    index: int  # NVML device index (CUDA_VISIBLE_DEVICES is not applied by NVML)
    name: str  # NVML marketing name, e.g. "NVIDIA H200"
    gpu_type: str | None  # catalog type, None when unknown
    memory_gib: float  # total device memory, GiB
    pcie_gen: int | None = None  # current PCIe link generation (max when idle-downclocked)
    pcie_width: int | None = None  # PCIe lanes
    nvlink_links: int = 0  # active NVLink links
    uuid: str = ""


@dataclass(frozen=True)
class NodeInfo:
    """This node: hostname, RAM, disk, GPUs and the driver/CUDA versions."""

    hostname: str
    cpu_count: int
    ram_gib: float
    disk_free_gib: float
    gpus: list[GpuInfo] = field(default_factory=list)
    driver: str = ""
    cuda: str = ""  # CUDA version the driver supports, e.g. "12.8"

    @property
    def gpu_types(self) -> list[str]:
        """Distinct catalog types of the GPUs (unknown ones left out), in index order."""
        out: list[str] = []
        for g in self.gpus:
            if g.gpu_type and g.gpu_type not in out:
                out.append(g.gpu_type)
        return out


def _norm(name: str) -> str:
    """Upper case, vendor words dropped, separators unified to single spaces."""
    s = name.upper()
    for word in ("NVIDIA", "GEFORCE", "TESLA", "TENSOR CORE GPU"):
        s = s.replace(word, " ")
    s = re.sub(r"[-_/,()]+", " ", s)
    return re.sub(r"\s+", " ", s).strip()


def _has(tokens: list[str], *words: str) -> bool:
    return all(w in tokens for w in words)


def gpu_type_from_name(name: str, memory_gib: float | None = None) -> str | None:
    """Catalog GPU type of an NVML device name; `memory_gib` settles names without a size.

    Examples: "NVIDIA GeForce RTX 4090" -> RTX-4090, "NVIDIA H200" -> H200-SXM,
    "NVIDIA H200 NVL" -> H200-NVL, "NVIDIA A100-SXM4-80GB" -> A100-80GB-SXM,
    "NVIDIA A100 80GB PCIe" -> A100-80GB-PCIe, "NVIDIA A10G" -> A10G. None when unknown.
    """
    t = _norm(name).split()
    out: str | None = None
    if "B200" in t or "B300" in t:  # "NVIDIA B200", "NVIDIA B300 SXM6 AC"
        out = "B300-SXM" if "B300" in t else "B200-SXM"
    elif "H200" in t:
        out = "H200-NVL" if "NVL" in t else "H200-SXM"
    elif "H100" in t:
        out = _h100(t)
    elif "A100" in t:
        out = _a100(t, memory_gib)
    elif "L40S" in t:
        out = "L40S"
    elif "L4" in t:
        out = "L4"
    elif "A10G" in t:
        out = "A10G"
    elif "A10" in t:
        out = "A10"
    elif "A40" in t:
        out = "A40"
    elif _has(t, "RTX", "4090") and "D" not in t:
        out = "RTX-4090"
    elif _has(t, "RTX", "3090") and "TI" not in t:
        out = "RTX-3090"
    return out if out in GPUS else None


def _h100(t: list[str]) -> str | None:
    """The H100 part of a normalized name's tokens."""
    if "NVL" in t:
        return None  # 94 GB dual-card part: not in the catalog
    if "PCIE" in t:
        return "H100-PCIe"
    return "H100-SXM"  # "H100 80GB HBM3", "H100 SXM5 80GB"


def _a100(t: list[str], memory_gib: float | None) -> str:
    """The A100 part of a normalized name's tokens; `memory_gib` settles names without a
    size."""
    big = memory_gib is not None and memory_gib > 60  # 80 GB class vs 40 GB class
    if "40GB" in t or (memory_gib is not None and not big and "80GB" not in t):
        return "A100-40GB"
    if "SXM4" in t or "SXM" in t:
        return "A100-80GB-SXM"
    return "A100-80GB-PCIe"


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def discover_gpus(nvml: Any = None) -> tuple[list[GpuInfo], str, str]:
    """(GPUs, driver version, CUDA version) through NVML; ([], "", "") when NVML is absent.

    `nvml` defaults to `pynvml`; any module with the same functions works (tests).
    """
    if nvml is None:
        try:
            import pynvml as nvml  # distribution nvidia-ml-py
        except ImportError:
            return [], "", ""
    try:
        nvml.nvmlInit()
    except Exception:  # no driver, no device: the CPU path
        return [], "", ""
    try:
        driver = _try(lambda: _s(nvml.nvmlSystemGetDriverVersion()), "")
        cv = _try(nvml.nvmlSystemGetCudaDriverVersion, 0)
        cuda = f"{cv // 1000}.{(cv % 1000) // 10}" if cv else ""
        gpus = [_one_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
    finally:
        _try(nvml.nvmlShutdown, None)
    return gpus, driver, cuda


def _try(fn, default):
    try:
        return fn()
    except Exception:  # NVML raises NVMLError_NotSupported etc. per query
        return default


def _one_gpu(nvml: Any, i: int) -> GpuInfo:
    h = nvml.nvmlDeviceGetHandleByIndex(i)
    name = _s(nvml.nvmlDeviceGetName(h))
    mem_gib = nvml.nvmlDeviceGetMemoryInfo(h).total / GIB
    # An idle GPU down-trains its link; the max generation is what a transfer gets.
    gen = _try(lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)), None)
    if gen is None:
        gen = _try(lambda: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)), None)
    width = _try(lambda: int(nvml.nvmlDeviceGetMaxPcieLinkWidth(h)), None)
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    links = 0
    for link in range(max_links):
        state = _try(lambda link=link: nvml.nvmlDeviceGetNvLinkState(h, link), None)
        if state is None:
            break  # NotSupported past the last link, or no NVLink at all
        links += 1 if int(state) == 1 else 0
    uuid = _try(lambda: _s(nvml.nvmlDeviceGetUUID(h)), "")
    return GpuInfo(
        index=i,
        name=name,
        gpu_type=gpu_type_from_name(name, mem_gib),
        memory_gib=round(mem_gib, 2),
        pcie_gen=gen,
        pcie_width=width,
        nvlink_links=links,
        uuid=uuid,
    )


def ram_gib() -> float:
    """Physical RAM of this node, GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


def disk_free_gib(path: str | Path = ".") -> float:
    """Free space of the file system holding `path`, GiB."""
    return shutil.disk_usage(path).free / GIB


def fs_type(path: str | Path) -> str:
    """File-system type of the mount holding `path` (from /proc/mounts; "" if unknown)."""
    p = Path(path).resolve()
    best, kind = "", ""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1]
        if (str(p) == mnt or str(p).startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, kind = mnt, parts[2]
    return kind


def discover_node(nvml: Any = None, disk_path: str | Path = ".") -> NodeInfo:
    """This node's GPUs, RAM and disk."""
    gpus, driver, cuda = discover_gpus(nvml)
    return NodeInfo(
        hostname=socket.gethostname(),
        cpu_count=os.cpu_count() or 1,
        ram_gib=round(ram_gib(), 1),
        disk_free_gib=round(disk_free_gib(disk_path), 1),
        gpus=gpus,
        driver=driver,
        cuda=cuda,
    )


def interconnect_of(gpus: list[GpuInfo]) -> str:
    """`nvlink` when every GPU of the group has an active NVLink link, else `pcie`."""
    return "nvlink" if gpus and all(g.nvlink_links > 0 for g in gpus) else "pcie"
