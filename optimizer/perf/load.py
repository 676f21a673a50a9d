"""Switch costs: cold start, wake from host RAM (sleep level 1), wake from disk (level 2), sleep."""

from __future__ import annotations

from planner.catalog.gpus import GpuSpec
from planner.optimizer.perf.calib import Calib
from planner.units import GB


def checkpoint_read_s(
    total_bytes: float, calib: Calib, disk_read_gbps: float | None = None
) -> float:
    """Read a safetensors checkpoint from disk into the GPUs, s.

    Cold pages fault in from the disk (mmap: capped however fast the disk is), then the CPU
    deserializes and copies them (pageable) to the GPU: the two rates add in series.
    """
    disk = (
        min(disk_read_gbps or calib.disk_read_gbps, calib.page_fault_read_cap_gbps) * GB
    )  # bytes/s
    loader = calib.loader_gbps * GB  # bytes/s
    return total_bytes / disk + total_bytes / loader


def load_times(
    total_bytes: float,
    per_gpu_bytes: float,
    gpu: GpuSpec,
    calib: Calib,
    disk_read_gbps: float | None = None,
) -> dict[str, float]:
    """cold_start_s, wake_host_s, wake_disk_s, sleep_s of one instance.

    Wake and sleep (level 1) move each GPU's weights over its own host link in parallel;
    level 2 drops the weights, so its wake reads the checkpoint again (no engine init).
    The CPU build of vLLM has no sleep mode: every wake is a restart, every sleep a stop.
    """
    h2d = min(calib.h2d_gbps, gpu.pcie_gbps) * GB  # bytes/s per GPU
    d2h = min(calib.d2h_gbps, gpu.pcie_gbps) * GB  # bytes/s per GPU
    read = checkpoint_read_s(total_bytes, calib, disk_read_gbps)
    if gpu.arch == "cpu":
        cold = calib.engine_init_s + read
        return {
            "cold_start_s": cold,
            "wake_host_s": cold,
            "wake_disk_s": cold,
            "sleep_s": calib.sleep_fixed_s,
        }
    return {
        "cold_start_s": calib.engine_init_s + read,
        "wake_host_s": calib.wake_fixed_s + per_gpu_bytes / h2d,
        "wake_disk_s": calib.reload_fixed_s + read,
        "sleep_s": calib.sleep_fixed_s + per_gpu_bytes / d2h,
    }
