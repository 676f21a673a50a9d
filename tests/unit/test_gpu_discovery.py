"""GPU discovery (planner.gpu_discovery): names -> catalog types, NVML through a fake module,
nvidia-smi through a fake executable on PATH (this machine has no GPU, so both are fakes: the
real paths run in tests/integration/test_gpu_check.py on a GPU machine), and none."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from planner.gpu_discovery import discover_gpus, gpu_type_from_name
from planner.profiler.devices import interconnect_of

NAMES = [
    ("NVIDIA GeForce RTX 4090", None, "RTX-4090"),
    ("NVIDIA GeForce RTX 3090", None, "RTX-3090"),
    ("NVIDIA GeForce RTX 3090 Ti", None, None),
    ("NVIDIA GeForce RTX 4090 D", None, None),
    ("NVIDIA H200", 140.4, "H200-SXM"),
    ("NVIDIA H200 NVL", 140.4, "H200-NVL"),
    ("NVIDIA H100 80GB HBM3", 79.6, "H100-SXM"),
    ("NVIDIA H100 PCIe", 79.6, "H100-PCIe"),
    ("NVIDIA H100 NVL", 93.6, None),
    ("NVIDIA A100-SXM4-80GB", 80.0, "A100-80GB-SXM"),
    ("NVIDIA A100-SXM4-40GB", 40.0, "A100-40GB"),
    ("NVIDIA A100-PCIE-40GB", 40.0, "A100-40GB"),
    ("NVIDIA A100 80GB PCIe", 80.0, "A100-80GB-PCIe"),
    ("NVIDIA A100-PCIE", 80.0, "A100-80GB-PCIe"),
    ("NVIDIA A10", 22.5, "A10"),
    ("NVIDIA A10G", 22.5, "A10G"),
    ("NVIDIA L4", 22.5, "L4"),
    ("NVIDIA L40S", 45.0, "L40S"),
    ("NVIDIA L40", 45.0, None),
    ("Tesla T4", 15.0, None),
]


@pytest.mark.parametrize(("name", "mem", "want"), NAMES)
def test_gpu_type_from_name(name, mem, want):
    assert gpu_type_from_name(name, mem) == want


class FakeNvml:
    """A pynvml stand-in: two H200s, the first with 18 NVLinks up, the second with none."""

    NVML_NVLINK_MAX_LINKS = 18

    class NotSupported(Exception):
        pass

    def __init__(self, fail_init=False):
        self.fail_init = fail_init
        self.shut = False

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlSystemGetDriverVersion(self):
        return b"570.124.06"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12080

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=int(140.4 * 1024**3), free=int(100.5 * 1024**3))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        if h == 1:
            raise self.NotSupported()
        return 5

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 4

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetNvLinkState(self, h, link):
        if h == 1:
            raise self.NotSupported()
        return 1

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"


def test_discover_gpus_with_fake_nvml():
    """NVML path with a fake module (no GPU here): names mapped, links counted, versions read."""
    nv = FakeNvml()
    found = discover_gpus(nv)
    gpus = found.gpus
    assert found.source == "nvml" and not found.reason
    assert found.driver == "570.124.06"
    assert found.cuda == "12.8"
    assert [g.gpu_type for g in gpus] == ["H200-SXM", "H200-SXM"]
    assert gpus[0].nvlink_links == 18 and gpus[1].nvlink_links == 0
    assert gpus[0].pcie_gen == 5 and gpus[1].pcie_gen == 4  # falls back to the current gen
    assert gpus[0].pcie_width == 16
    assert gpus[0].memory_gib == pytest.approx(140.4)
    assert gpus[0].free_gib == pytest.approx(100.5)
    assert nv.shut
    assert interconnect_of(gpus) == "pcie"
    assert interconnect_of(gpus[:1]) == "nvlink"


# What `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits` prints on a host with
# two H100s (the second lacking PCIe readings) and one card whose name holds a comma.
SMI_ROWS = """\
0, NVIDIA H100 80GB HBM3, 81559, 80000, GPU-aaa, 570.124.06, 5, 16
1, NVIDIA H100 80GB HBM3, 81559, 1024, GPU-bbb, 570.124.06, [N/A], [N/A]
2, Odd, Card, 16384, 16000, GPU-ccc, 570.124.06, 4, 8
"""


def _fake_smi(folder, body: str, monkeypatch) -> None:
    """A fake `nvidia-smi` in `folder`, first on PATH (a fake: this machine has no GPU and no
    driver)."""
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{body}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_nvidia_smi_is_the_fallback_when_nvml_does_not_start(tmp_path, monkeypatch):
    _fake_smi(tmp_path, f"cat <<'EOF'\n{SMI_ROWS}EOF", monkeypatch)
    found = discover_gpus(FakeNvml(fail_init=True))
    assert found.source == "nvidia-smi" and not found.reason
    assert found.driver == "570.124.06" and found.cuda == ""
    assert [g.index for g in found.gpus] == [0, 1, 2]
    assert [g.gpu_type for g in found.gpus] == ["H100-SXM", "H100-SXM", None]
    first, second, odd = found.gpus
    assert first.memory_gib == pytest.approx(79.65) and first.free_gib == pytest.approx(78.12)
    assert (first.pcie_gen, first.pcie_width, first.uuid) == (5, 16, "GPU-aaa")
    assert (second.pcie_gen, second.pcie_width, second.free_gib) == (None, None, 1.0)
    assert odd.name == "Odd, Card"


def test_nvml_first_when_both_answer(tmp_path, monkeypatch):
    _fake_smi(tmp_path, f"cat <<'EOF'\n{SMI_ROWS}EOF", monkeypatch)
    assert discover_gpus(FakeNvml()).source == "nvml"


def test_no_gpu_is_an_empty_list_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    found = discover_gpus(FakeNvml(fail_init=True))
    assert found.gpus == [] and found.source == ""
    assert "NVML: no driver answered (NVML Shared Library Not Found)" in found.reason
    assert "nvidia-smi: not on PATH" in found.reason


def test_a_failing_nvidia_smi_is_a_reason_not_an_error(tmp_path, monkeypatch):
    _fake_smi(
        tmp_path,
        "echo 'NVIDIA-SMI has failed because it could not communicate' >&2; exit 9",
        monkeypatch,
    )
    found = discover_gpus(FakeNvml(fail_init=True))
    assert found.gpus == []
    assert "nvidia-smi: exit 9 NVIDIA-SMI has failed" in found.reason


def test_the_local_backend_reads_free_memory_through_discovery(tmp_path, monkeypatch):
    """The local backend's device and free memory come from the same discovery (here the
    nvidia-smi fallback: NVML's module is not installed on this machine)."""
    from planner.adjuster.backends.local import LocalBackend, detect_device

    _fake_smi(tmp_path, f"cat <<'EOF'\n{SMI_ROWS}EOF", monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # NVML not importable
    assert detect_device() == "cuda"
    assert LocalBackend("cuda").gpu_free_gib("here", [1, 0, 7]) == {1: 1.0, 0: 78.12}
