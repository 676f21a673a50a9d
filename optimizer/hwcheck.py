"""The GPU check: a hardware profile of this machine against the GPU catalog and the perf model.

`scripts/gpu-check.sh` runs `planner profile hardware --device cuda`, then
`planner profile check PROFILE_DIR [--tests-rc N]`, which loads the profiles and prints what
this module finds. For each profiled GPU type it compares, measured against expected: the dense GEMM rates
(bf16, fp8) and the device-memory copy rate against the catalog's peaks (a measurement far
above a peak means a wrong catalog row; far below, a wrong card or a throttled one); the
pinned host-to-device copy (the rate a level-1 wake moves weights at) against the catalog's
PCIe link; and `planner estimate`'s `wake_host_s` for a model of known size against the
wake the measured copy rate gives. NVML must have named the device (the profile's type is
a catalog row). Pure: profiles in, checks and problems out (no torch: it runs anywhere).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planner.catalog.gpus import GPUS, GpuSpec
from planner.schemas.profile import Profile

WAKE_MODEL = ("Llama-3.1-8B-Instruct", "bf16")  # 16.06 GB of weights on one GPU


@dataclass(frozen=True)
class Check:
    """One figure: measured / expected must lie in [lo, hi]."""

    name: str
    measured: float
    expected: float
    unit: str
    lo: float
    hi: float
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.measured / self.expected if self.expected else float("inf")

    @property
    def ok(self) -> bool:
        return self.lo <= self.ratio <= self.hi


def checks(profile: Profile, gpu: GpuSpec) -> list[Check]:
    """The checks of one profiled GPU type against its catalog row and the perf model."""
    from planner.catalog.models import resolve_arch_name
    from planner.optimizer.perf import default_calib, instance_perf

    hw = profile.hardware
    out: list[Check] = []
    peaks = {"bf16": gpu.bf16_tflops, "fp16": gpu.fp16_tflops, "fp8": gpu.fp8_tflops}
    for dtype, stat in sorted(hw.gemm_tflops.items()):
        if peaks.get(dtype):
            note = "large GEMMs reach 0.6-0.9 of the dense peak"
            out.append(
                Check(f"GEMM {dtype}", stat.median, peaks[dtype], "TFLOP/s", 0.4, 1.05, note)
            )
    if hw.device_copy_gbps is not None:
        note = "a copy reads and writes: 0.7-0.95 of the HBM peak"
        out.append(
            Check(
                "memory copy",
                hw.device_copy_gbps.median,
                gpu.memory_bandwidth_gbps,
                "GB/s",
                0.5,
                1.05,
                note,
            )
        )
    if hw.h2d_pinned_gbps is not None:
        h2d = hw.h2d_pinned_gbps.median
        note = f"PCIe gen{gpu.pcie_gen} per direction"
        out.append(Check("host->device pinned", h2d, gpu.pcie_gbps, "GB/s", 0.3, 1.05, note))
        # wake from host RAM: the model's figure (its default h2d rate, no profile) against
        # the same formula at the measured rate
        arch = resolve_arch_name(WAKE_MODEL[0])
        predicted = instance_perf(arch, WAKE_MODEL[1], gpu, 1).wake_host_s
        cal = dataclasses.replace(default_calib(gpu.arch), h2d_gbps=h2d)
        measured_wake = instance_perf(arch, WAKE_MODEL[1], gpu, 1, calib=cal).wake_host_s
        note = f"{WAKE_MODEL[0]} {WAKE_MODEL[1]}: `planner estimate` vs at the measured rate"
        out.append(Check("wake_host_s", measured_wake, predicted, "s", 0.67, 1.5, note))
    return out


def check_profiles(
    profiles: list[Profile], where: str
) -> tuple[list[tuple[str, list[Check]]], list[str]]:
    """(checks per profiled catalog GPU type, problems) of the CUDA profiles (`where` names
    their folder in the problem when there is none)."""
    problems: list[str] = []
    out: list[tuple[str, list[Check]]] = []
    for prof in profiles:
        if prof.gpu_type == "cpu":
            continue
        gpu = GPUS.get(prof.gpu_type)
        if gpu is None:
            problems.append(
                f"{prof.gpu_type}: NVML's device name maps to no catalog row "
                "(add the GPU to planner/catalog/gpus.yaml)"
            )
            continue
        out.append((gpu.name, checks(prof, gpu)))
    if not out and not problems:
        problems.append(f"no CUDA profile in {where}")
    return out, problems


def result_line(found: list[tuple[str, list[Check]]], ok: bool, tests_rc: int | None) -> str:
    """The check's closing `RESULT` line: every ratio, the types found, the tests' exit code."""
    fields = [
        f"{name}_{c.name.replace(' ', '_').replace('->', '_to_').lower()}_ratio={c.ratio:.3f}"
        for name, cs in found
        for c in cs
    ]
    tail = f"nvml_types={len(found)} gpu_tests_rc={tests_rc} pass={int(ok)}"
    return "RESULT " + " ".join([*fields, tail])
