"""Hardware microbenchmarks: shape plans, result assembly, the CPU path for real (tiny sizes),
and the CUDA path's logic with a fake torch (no GPU on the test machines: the real CUDA runs
are `planner profile hardware --device cuda` on a GPU node)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.errors import ProfileError
from planner.profiler import hardware as hw
from planner.profiler import hardware_targets as hwt
from planner.schemas.profile import Stat


def test_plan_config_per_device():
    cuda = hw.plan_config("cuda", fp8=True)
    assert "fp8" in cuda.gemm_dtypes and "bf16" in cuda.gemm_dtypes
    assert max(m * n * k for m, n, k in cuda.gemm_shapes) >= 8192**3  # big enough to saturate
    assert cuda.h2d_bytes >= 1 << 30
    assert "fp8" not in hw.plan_config("cuda").gemm_dtypes
    cpu = hw.plan_config("cpu", quick=True)
    assert cpu.h2d_bytes == 0 and cpu.device == "cpu"
    assert all(m <= 512 for m, _, _ in cpu.gemm_shapes)
    with pytest.raises(ProfileError):
        hw.plan_config("tpu")


def test_gemm_flops():
    assert hw.gemm_flops(2, 3, 4) == 48.0


def test_assemble_picks_best_shape_per_dtype():
    s = lambda x: Stat(median=x, spread=0.1, n=3)  # noqa: E731
    got = hw.assemble(
        [
            ("gemm", ("bf16", (1, 1, 1)), s(100.0)),
            ("gemm", ("bf16", (2, 2, 2)), s(700.0)),
            ("gemm", ("fp8", (2, 2, 2)), s(1400.0)),
            ("device_copy_gbps", None, s(4000.0)),
            ("ram_gbps", None, s(50.0)),
        ],
        notes=["n1"],
    )
    assert got.gemm_tflops["bf16"].median == 700.0
    assert got.gemm_tflops["fp8"].median == 1400.0
    assert len(got.gemm_points) == 3
    assert got.device_copy_gbps.median == 4000.0
    assert got.notes == ["n1"]


def test_cpu_path_runs_for_real(tmp_path):
    import torch

    cfg = hw.HwConfig(
        device="cpu",
        gemm_shapes=((64, 64, 64),),
        gemm_dtypes=("bf16", "fp32"),
        copy_bytes=1 << 20,
        h2d_bytes=0,
        disk_bytes=4 << 20,
        ram_bytes=1 << 20,
        warmup=1,
        reps=3,
        target_s=0.005,
    )
    target = hwt.targets(torch, "cpu")[0]
    assert target.gpu_type == "cpu" and target.index is None
    seen = []
    res = hwt.measure_target(
        torch,
        target,
        cfg,
        disk_dir=tmp_path,
        node_steps=True,
        on_step=lambda st: seen.append(st.label),
    )
    assert set(res.gemm_tflops) == {"bf16", "fp32"}
    for s in (res.device_copy_gbps, res.disk_read_gbps, res.ram_gbps):
        assert s is not None and s.median > 0 and s.n >= 3
    assert res.h2d_pinned_gbps is None
    assert len(seen) == 5
    assert list(tmp_path.iterdir()) == []  # the disk test file is removed


def test_cold_read_reads_whole_file(tmp_path):
    p = tmp_path / "f.bin"
    hw.write_test_file(p, 3 * 1024 * 1024 + 5, chunk=1 << 20)
    assert hw.read_file_cold(p, chunk=1 << 20) == 3 * 1024 * 1024 + 5


class FakeCuda:
    """torch.cuda stand-in: two H200s and one L40S, capability 9.0."""

    names = ("NVIDIA H200", "NVIDIA H200", "NVIDIA L40S")
    mem = (140.4, 140.4, 45.0)

    def __init__(self):
        self.current = 0
        self.Event = lambda enable_timing: SimpleNamespace()

    def is_available(self):
        return True

    def device_count(self):
        return 3

    def get_device_name(self, i):
        return self.names[i]

    def get_device_properties(self, i):
        return SimpleNamespace(total_memory=int(self.mem[i] * 1024**3))

    def get_device_capability(self):
        return (9, 0)


def test_cuda_targets_one_device_per_type():
    """CUDA-path logic with a fake torch (needs no GPU)."""
    fake = SimpleNamespace(cuda=FakeCuda(), _scaled_mm=object(), float8_e4m3fn=object())
    t = hwt.targets(fake, "cuda")
    assert [(x.gpu_type, x.index) for x in t] == [("H200-SXM", 0), ("L40S", 2)]
    assert hw.fp8_supported(fake)
    fake.cuda.get_device_capability = lambda: (8, 0)  # Ampere: no fp8 tensor cores
    assert not hw.fp8_supported(fake)
    del fake._scaled_mm
    fake.cuda.get_device_capability = lambda: (9, 0)
    assert not hw.fp8_supported(fake)


def test_cuda_targets_without_cuda_raises():
    fake = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
    with pytest.raises(ProfileError, match="no CUDA device"):
        hwt.targets(fake, "cuda")


def test_cuda_step_plan():
    """The CUDA plan (fake torch, no GPU): GEMMs per dtype and shape, copy, 3 host-link steps,
    node steps once; step functions are not run here."""
    fake = SimpleNamespace(cuda=FakeCuda())
    cfg = hw.plan_config("cuda", fp8=True)
    run = hw.plan_steps(fake, cfg, disk_dir=None, node_steps=False)
    labels = [s.label for s in run.steps]
    assert sum(lab.startswith("GEMM") for lab in labels) == 3 * len(cfg.gemm_shapes)
    assert "device memory copy" in labels
    assert {"host->device pinned", "host->device pageable", "device->host pinned"} <= set(labels)
    assert "RAM copy" not in labels
    run2 = hw.plan_steps(fake, cfg, disk_dir=None, node_steps=True)
    assert run2.steps[-1].label == "RAM copy"


def test_type_for_unknown_name_is_file_safe():
    assert hwt.type_for("Tesla T4", 15.0) == "Tesla-T4"
    assert hwt.type_for("NVIDIA H200 NVL", 140.0) == "H200-NVL"
