"""The GPU check's logic on CPU: synthetic profiles against the catalog, the RESULT line,
and scripts/gpu-check.sh on a machine without a GPU (it must say so and exit 2)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planner.catalog.gpus import resolve_gpu
from planner.cli.main import main
from planner.optimizer.hwcheck import check_profiles
from planner.profiler import store
from planner.schemas.profile import Hardware, Profile, Stat

ROOT = Path(__file__).resolve().parents[2]


def _profile(gpu_type: str, **scale: float) -> Profile:
    """A profile whose figures are `scale` x typical shares of the catalog's peaks."""
    g = resolve_gpu(gpu_type)
    s = {"bf16": 0.75, "fp8": 0.7, "copy": 0.85, "h2d": 0.8, **scale}
    hw = Hardware(
        gemm_tflops={
            "bf16": Stat(median=s["bf16"] * g.bf16_tflops),
            "fp8": Stat(median=s["fp8"] * g.fp8_tflops),
        },
        device_copy_gbps=Stat(median=s["copy"] * g.memory_bandwidth_gbps),
        h2d_pinned_gbps=Stat(median=s["h2d"] * g.pcie_gbps),
    )
    return Profile(node="n", gpu_type=gpu_type, hardware=hw)


def _write(tmp_path: Path, *profiles: Profile) -> Path:
    for p in profiles:
        store.save(p, store.profile_path(tmp_path, p.node, p.gpu_type))
    return tmp_path


def _check_dir(d: Path):
    return check_profiles(store.load_profiles(sorted(d.glob("*.yaml"))), str(d))


def _check_cmd(args: list[str]) -> int:
    """`planner profile check ARGS`: its exit code."""
    try:
        main(["profile", "check", *args])
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_typical_figures_pass_and_name_every_check(tmp_path):
    found, problems = _check_dir(_write(tmp_path, _profile("H100-SXM")))
    assert not problems
    ((name, cs),) = found
    assert name == "H100-SXM"
    assert {c.name for c in cs} == {
        "GEMM bf16",
        "GEMM fp8",
        "memory copy",
        "host->device pinned",
        "wake_host_s",
    }
    assert all(c.ok for c in cs), [(c.name, c.ratio) for c in cs]


@pytest.mark.parametrize(
    "scale,failing",
    [
        ({"bf16": 2.0}, "GEMM bf16"),  # above the dense peak: a wrong catalog row
        ({"copy": 0.2}, "memory copy"),  # a fifth of the HBM rate: wrong card or throttled
        ({"h2d": 0.1}, "host->device pinned"),  # a degraded PCIe link ...
    ],
)
def test_a_figure_out_of_its_band_fails(tmp_path, scale, failing):
    found, _ = _check_dir(_write(tmp_path, _profile("B200-SXM", **scale)))
    bad = {c.name for c in found[0][1] if not c.ok}
    assert failing in bad
    if failing == "host->device pinned":  # ... also makes the model's wake too optimistic
        assert "wake_host_s" in bad


def test_an_unknown_device_is_a_problem_and_the_result_line_comes_last(tmp_path, capsys):
    odd = _profile("L40S").model_copy(update={"gpu_type": "NVIDIA-GH300"})
    rc = _check_cmd([str(_write(tmp_path, odd, _profile("L40S"))), "--tests-rc", "0"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 1
    assert any("NVIDIA-GH300" in line and "catalog" in line for line in out)
    assert out[-1].startswith("RESULT ") and out[-1].endswith("pass=0")
    assert "L40S_gemm_bf16_ratio=" in out[-1]


def test_failed_gpu_tests_fail_the_check(tmp_path, capsys):
    assert _check_cmd([str(_write(tmp_path, _profile("L40S"))), "--tests-rc", "1"]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("pass=0")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_script_without_a_gpu_says_so_and_exits_2(tmp_path):
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
    )
    lines = r.stdout.strip().splitlines()
    if r.returncode != 2:  # a GPU is here: the script ran for real
        pytest.skip("a CUDA device is visible: scripts/gpu-check.sh ran the real check")
    assert lines[0].startswith("error: no CUDA device") and lines[1].startswith("fix: ")
    assert lines[-1].startswith("RESULT ") and lines[-1].endswith("pass=0")
