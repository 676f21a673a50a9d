"""What this node has: GPUs (`planner.gpu_discovery`: NVML, else nvidia-smi), RAM and disk;
the `cpu` device when no GPU answers."""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.gpu_discovery import GpuInfo, discover_gpus
from planner.units import GIB


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
    found = discover_gpus(nvml)
    return NodeInfo(
        hostname=socket.gethostname(),
        cpu_count=os.cpu_count() or 1,
        ram_gib=round(ram_gib(), 1),
        disk_free_gib=round(disk_free_gib(disk_path), 1),
        gpus=found.gpus,
        driver=found.driver,
        cuda=found.cuda,
    )


def interconnect_of(gpus: list[GpuInfo]) -> str:
    """`nvlink` when every GPU of the group has an active NVLink link, else `pcie`."""
    return "nvlink" if gpus and all(g.nvlink_links > 0 for g in gpus) else "pcie"
