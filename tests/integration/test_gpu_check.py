"""The GPU check on a real GPU (tests marked `gpu`; skipped without a CUDA device).

Run by scripts/gpu-check.sh on a machine with an NVIDIA GPU and PyTorch with CUDA.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: tests marked gpu run on a GPU machine (scripts/gpu-check.sh)")
    return torch


def test_nvml_names_every_visible_gpu_as_a_catalog_type(torch_cuda):
    from planner.gpu_discovery import discover_gpus, gpu_type_from_name

    found = discover_gpus()
    gpus = found.gpus
    assert found.driver, f"{found.source} gave no driver version"
    assert len(gpus) >= torch_cuda.cuda.device_count()
    for g in gpus:
        assert gpu_type_from_name(g.name, g.memory_gib), f"{g.name} maps to no catalog row"


def test_quick_hardware_profile_agrees_with_the_catalog(torch_cuda, tmp_path):
    from planner.optimizer.hwcheck import check_profiles
    from planner.profiler import hardware_targets, store

    for prof in hardware_targets.profile_hardware(
        "cuda", "gpu-check", quick=True, disk_dir=tmp_path
    ):
        store.save(prof, store.profile_path(tmp_path, prof.node, prof.gpu_type))
    found, problems = check_profiles(store.load_profiles(sorted(tmp_path.glob("*.yaml"))), "")
    assert not problems, problems
    bad = [f"{name} {c.name}: ratio {c.ratio:.2f}" for name, cs in found for c in cs if not c.ok]
    assert not bad, bad
