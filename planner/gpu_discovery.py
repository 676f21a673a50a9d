"""This host's NVIDIA GPUs, found one way for everyone: the profiler, `planner apply`'s host
check and the local backend's device and free-memory readings.

NVML first (`pynvml`, distribution `nvidia-ml-py`, imported inside `discover_gpus`); where it
is not importable or does not start, the `nvidia-smi` executable on PATH (a driver without
the Python binding); neither: no GPU, with the reason (`GpuDiscovery.reason`). Both count
devices the same way (PCI bus order; CUDA_VISIBLE_DEVICES is not applied). NVML names
(`nvmlDeviceGetName`, nvidia-smi's `name`) map to catalog GPU types by `gpu_type_from_name`;
a name the catalog does not hold maps to None and the caller asks for an inline spec. Tests
pass a fake NVML module with the same functions, or put a fake `nvidia-smi` on PATH.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from planner.catalog.gpus import GPUS
from planner.units import GIB

SMI_TIMEOUT_S = 10.0
# nvidia-smi --help-query-gpu: one CSV row a device, in this order
SMI_FIELDS = (
    "index",
    "name",
    "memory.total",
    "memory.free",
    "uuid",
    "driver_version",
    "pcie.link.gen.max",
    "pcie.link.width.max",
)
MIB_PER_GIB = 1024.0
T = TypeVar("T")
D = TypeVar("D")


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML (or nvidia-smi) reports it."""

    index: int  # device index (CUDA_VISIBLE_DEVICES is not applied)
    name: str  # marketing name, e.g. "NVIDIA H200"
    gpu_type: str | None  # catalog type, None when unknown
    memory_gib: float  # total device memory, GiB
    pcie_gen: int | None = None  # current PCIe link generation (max when idle-downclocked)
    pcie_width: int | None = None  # PCIe lanes
    nvlink_links: int = 0  # active NVLink links (NVML only: nvidia-smi's query has none)
    uuid: str = ""
    free_gib: float | None = None  # free device memory when discovered, GiB


@dataclass(frozen=True)
class GpuDiscovery:
    """What discovery found: the GPUs, which way, and why none when none."""

    gpus: list[GpuInfo] = field(default_factory=list)
    source: str = ""  # "nvml", "nvidia-smi", or "" when neither answered
    reason: str = ""  # why no GPU was found ("" when some were)
    driver: str = ""
    cuda: str = ""  # CUDA version the driver supports, e.g. "12.8" (NVML only)


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


def discover_gpus(nvml: Any = None, smi: str | None = None) -> GpuDiscovery:
    """This host's GPUs: NVML's, else nvidia-smi's, else none with the reason.

    `nvml` defaults to `pynvml`; any module with the same functions works (tests). `smi`
    defaults to `nvidia-smi` on PATH.
    """
    found, why_not_nvml = _from_nvml(nvml)
    if found is not None:
        return found
    found, why_not_smi = _from_smi(smi)
    if found is not None:
        return found
    return GpuDiscovery(reason=f"{why_not_nvml}; {why_not_smi}")


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _try(fn: Callable[[], T], default: D) -> T | D:
    try:
        return fn()
    except Exception:  # NVML raises NVMLError_NotSupported etc. per query
        return default


def _from_nvml(nvml: Any) -> tuple[GpuDiscovery | None, str]:
    """(what NVML found, "") or (None, why NVML could not be asked)."""
    if nvml is None:
        try:
            import pynvml  # distribution nvidia-ml-py
        except ImportError:
            return None, "NVML: pynvml is not installed (pip install nvidia-ml-py)"
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as e:  # no driver, no device
        return None, f"NVML: no driver answered ({e or type(e).__name__})"
    try:
        driver = _try(lambda: _s(nvml.nvmlSystemGetDriverVersion()), "")
        cv = _try(nvml.nvmlSystemGetCudaDriverVersion, 0)
        cuda = f"{cv // 1000}.{(cv % 1000) // 10}" if cv else ""
        gpus = [_one_nvml_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
    finally:
        _try(nvml.nvmlShutdown, None)
    reason = "" if gpus else "NVML: the driver lists no device"
    return GpuDiscovery(gpus, "nvml", reason, driver, cuda), ""


def _one_nvml_gpu(nvml: Any, i: int) -> GpuInfo:
    h = nvml.nvmlDeviceGetHandleByIndex(i)
    name = _s(nvml.nvmlDeviceGetName(h))
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    mem_gib = mem.total / GIB
    # An idle GPU down-trains its link; the max generation is what a transfer gets.
    gen = _try(lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)), None)
    if gen is None:
        gen = _try(lambda: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)), None)
    width = _try(lambda: int(nvml.nvmlDeviceGetMaxPcieLinkWidth(h)), None)
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    links = 0
    for link in range(max_links):
        state = _try(partial(nvml.nvmlDeviceGetNvLinkState, h, link), None)
        if state is None:
            break  # NotSupported past the last link, or no NVLink at all
        links += 1 if int(state) == 1 else 0
    uuid = _try(lambda: _s(nvml.nvmlDeviceGetUUID(h)), "")
    free = getattr(mem, "free", None)
    return GpuInfo(
        index=i,
        name=name,
        gpu_type=gpu_type_from_name(name, mem_gib),
        memory_gib=round(mem_gib, 2),
        pcie_gen=gen,
        pcie_width=width,
        nvlink_links=links,
        uuid=uuid,
        free_gib=round(free / GIB, 2) if free is not None else None,
    )


def _from_smi(smi: str | None) -> tuple[GpuDiscovery | None, str]:
    """(what nvidia-smi found, "") or (None, why it could not be asked)."""
    import shutil
    import subprocess

    smi = smi or shutil.which("nvidia-smi")
    if not smi:
        return None, "nvidia-smi: not on PATH"
    query = f"--query-gpu={','.join(SMI_FIELDS)}"
    try:
        out = subprocess.run(
            [smi, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=SMI_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"nvidia-smi: did not run ({e})"
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [""]
        return None, f"nvidia-smi: exit {out.returncode} {tail[0]}".rstrip()
    gpus = [g for line in out.stdout.splitlines() if (g := _one_smi_gpu(line)) is not None]
    driver = next((d for line in out.stdout.splitlines() if (d := _smi_driver(line))), "")
    reason = "" if gpus else "nvidia-smi: lists no device"
    return GpuDiscovery(gpus, "nvidia-smi", reason, driver), ""


def _smi_cells(line: str) -> list[str] | None:
    """The row's cells by SMI_FIELDS, or None for a row of another shape. The name is the
    one cell that may hold a comma, so the row is split from both ends around it."""
    parts = [p.strip() for p in line.split(",")]
    n = len(SMI_FIELDS)
    if len(parts) < n or not parts[0].isdigit():
        return None
    extra = len(parts) - n  # commas inside the name
    return [parts[0], ", ".join(parts[1 : 2 + extra]), *parts[2 + extra :]]


def _num(cell: str) -> float | None:
    """A number cell; nvidia-smi writes `[N/A]` or `[Not Supported]` for what it lacks."""
    try:
        return float(cell)
    except ValueError:
        return None


def _one_smi_gpu(line: str) -> GpuInfo | None:
    cells = _smi_cells(line)
    if cells is None:
        return None
    row = dict(zip(SMI_FIELDS, cells, strict=True))
    total_mib = _num(row["memory.total"])
    free_mib = _num(row["memory.free"])
    mem_gib = total_mib / MIB_PER_GIB if total_mib is not None else 0.0
    gen = _num(row["pcie.link.gen.max"])
    width = _num(row["pcie.link.width.max"])
    return GpuInfo(
        index=int(row["index"]),
        name=row["name"],
        gpu_type=gpu_type_from_name(row["name"], mem_gib if total_mib is not None else None),
        memory_gib=round(mem_gib, 2),
        pcie_gen=int(gen) if gen is not None else None,
        pcie_width=int(width) if width is not None else None,
        uuid=row["uuid"],
        free_gib=round(free_mib / MIB_PER_GIB, 2) if free_mib is not None else None,
    )


def _smi_driver(line: str) -> str:
    cells = _smi_cells(line)
    return cells[SMI_FIELDS.index("driver_version")] if cells is not None else ""
