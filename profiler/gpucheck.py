"""The GPU check: a hardware profile of this machine against the GPU catalog and the perf model.

`scripts/gpu-check.sh` runs `planner profile hardware --device cuda`, then this module:

    python -m planner.profiler.gpucheck PROFILE_DIR [--tests-rc N]

For each profiled GPU type it compares, measured against expected: the dense GEMM rates
(bf16, fp8) and the device-memory copy rate against the catalog's peaks (a measurement far
above a peak means a wrong catalog row; far below, a wrong card or a throttled one); the
pinned host-to-device copy (the rate a level-1 wake moves weights at) against the catalog's
PCIe link; and `planner estimate`'s `wake_host_s` for a model of known size against the
wake the measured copy rate gives. NVML must have named the device (the profile's type is
a catalog row). Prints a table and ends with one `RESULT` line; exit 1 when a check fails.
Pure apart from reading the profiles and printing (no torch: it runs anywhere).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

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
            Check("memory copy", hw.device_copy_gbps.median, gpu.memory_bandwidth_gbps, "GB/s", 0.5, 1.05, note)
        )  # fmt: skip
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


def check_dir(profile_dir: Path) -> tuple[list[tuple[str, list[Check]]], list[str]]:
    """(checks per profiled catalog GPU type, problems) of every CUDA profile in the dir."""
    from planner.profiler import store

    problems: list[str] = []
    out: list[tuple[str, list[Check]]] = []
    paths = sorted(Path(profile_dir).glob("*.yaml"))
    for prof in store.load_profiles(paths):
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
        problems.append(f"no CUDA profile in {profile_dir}")
    return out, problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile_dir", type=Path)
    ap.add_argument("--tests-rc", type=int, default=None, help="exit code of the gpu tests")
    args = ap.parse_args(argv)
    found, problems = check_dir(args.profile_dir)
    ok = not problems and (args.tests_rc in (None, 0))
    fields: list[str] = []
    for name, cs in found:
        print(f"{name}:")
        for c in cs:
            mark = "ok  " if c.ok else "FAIL"
            print(
                f"  {mark} {c.name:20} measured {c.measured:10.3f} {c.unit:8} expected "
                f"{c.expected:10.3f}  ratio {c.ratio:5.2f} in [{c.lo}, {c.hi}]  ({c.note})"
            )
            ok &= c.ok
            key = c.name.replace(" ", "_").replace("->", "_to_").lower()
            fields.append(f"{name}_{key}_ratio={c.ratio:.3f}")
    for p in problems:
        print(f"problem: {p}")
    if args.tests_rc is not None:
        print(f"gpu-marked tests: exit code {args.tests_rc}")
    print(
        "RESULT "
        + " ".join(fields)
        + f" nvml_types={len(found)} gpu_tests_rc={args.tests_rc} pass={int(ok)}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
