"""The kernel layer (optimizer/perf/kernels.py): measured GEMM times where the tables cover a
shape, interpolated between them, rescaled by the roofline just outside, roofline elsewhere."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.catalog.gpus import resolve_gpu
from planner.catalog.kernel_tables import gemm_table
from planner.catalog.models import resolve_arch_name
from planner.cli.main import main
from planner.optimizer.perf import default_calib, instance_perf
from planner.optimizer.perf.kernels import GemmTable, gemm_s
from planner.optimizer.perf.latency import dense_compute_s_per_token

# a 2 x 2 x 2 grid: 10 us at m = 1, 80 us at m = 64 (for every n, k)
TABLE = GemmTable.from_lists(
    [1, 64], [1024, 4096], [1024, 4096], [[[10, 10], [10, 10]], [[80, 80], [80, 80]]]
)


def roof(m, n, k):
    return 2.0 * m * n * k  # compute-bound at any m: time grows with m


def test_exact_point_is_measured():
    s, src = gemm_s(TABLE, 64, 4096, 1024, roof)
    assert src == "measured" and s == pytest.approx(80e-6)


def test_between_points_is_interpolated_log_linear():
    s, src = gemm_s(TABLE, 8, 2048, 2048, roof)  # m = 8: half-way between 1 and 64 in log m
    assert src == "interpolated"
    assert s == pytest.approx(np.sqrt(10 * 80) * 1e-6)


def test_just_outside_keeps_utilization_and_scales_by_roofline():
    s, src = gemm_s(TABLE, 128, 4096, 4096, roof)  # twice the largest m
    assert src == "interpolated" and s == pytest.approx(160e-6)


def test_far_outside_or_no_table_leaves_it_to_the_roofline():
    assert gemm_s(TABLE, 64 * 8, 4096, 4096, roof) is None  # 8x past the edge
    assert gemm_s(None, 64, 4096, 4096, roof) is None


def test_unmeasured_corner_is_not_invented():
    arr = [[[10, None], [10, 10]], [[80, 80], [80, 80]]]
    t = GemmTable.from_lists([1, 64], [1024, 4096], [1024, 4096], arr)
    assert gemm_s(t, 1, 1024, 4096, roof) is None
    assert gemm_s(t, 1, 4096, 4096, roof)[1] == "measured"


def test_shipped_tables_answer_for_the_measured_gpus_only():
    assert gemm_table("H100-SXM", "fp8") is not None
    assert gemm_table("A100-80GB-SXM", "fp8") is None  # Ampere has no fp8 GEMMs
    assert gemm_table("RTX-4090", "bf16") is None
    t = gemm_table("H100-SXM", "bf16")
    s, src = gemm_s(t, 4096, 8192, 8192, roof)
    assert src == "measured"
    # a large bf16 GEMM on H100 runs at 70-90% of its 989 TFLOP/s peak
    assert 0.7 < 2 * 4096 * 8192 * 8192 / s / 989e12 < 0.9


def test_step_model_source_per_gpu():
    llama = resolve_arch_name("Llama-3.1-8B-Instruct")
    src = {
        g: instance_perf(llama, "bf16", resolve_gpu(g)).step.kernel_source
        for g in ("H100-SXM", "L40S", "A100-80GB-SXM", "RTX-4090", "B200-SXM")
    }
    assert src["RTX-4090"] == src["B200-SXM"] == "roofline"
    assert {src["H100-SXM"], src["L40S"], src["A100-80GB-SXM"]} <= {"measured", "interpolated"}


def test_a_profile_efficiency_scales_the_measured_layer():
    llama, gpu = resolve_arch_name("Llama-3.1-8B-Instruct"), resolve_gpu("L40S")
    cal = default_calib("ada")
    base, _ = dense_compute_s_per_token(llama, "bf16", gpu, 1, cal, 2048)
    half = cal.__class__(**{**cal.__dict__, "compute_efficiency": cal.compute_efficiency / 2})
    slow, _ = dense_compute_s_per_token(llama, "bf16", gpu, 1, half, 2048)
    assert slow == pytest.approx(2 * base)


@pytest.mark.parametrize(
    ("gpu", "source"), [("H100-SXM", "interpolated"), ("RTX-4090", "roofline")]
)
def test_estimate_json_says_source(gpu, source, capsys):
    argv = ["estimate", "--model", "Llama-3.1-8B-Instruct", "--gpu", gpu, "--json"]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    assert json.loads(capsys.readouterr().out)["source"] == source


def test_a_generation_without_tables_borrows_the_shape_dependence():
    """Blackwell has no GEMM table: its narrow per-GPU GEMMs at high TP lose utilization as
    Hopper's measured ones do, so the per-GPU compute of a token at TP 8 is slower than an
    eighth of TP 1's (a flat efficiency makes them equal: TTFT +21% at TP 1, -13% at TP 8 on
    the B200 serving runs). The level stays the fitted one; Ampere, with no borrowed table,
    keeps the flat roofline."""
    arch, calib = resolve_arch_name("Llama-3.1-70B"), default_calib("blackwell")
    b200 = resolve_gpu("B200-SXM")
    per_gpu = {
        tp: tp * dense_compute_s_per_token(arch, "fp8", b200, tp, calib, 8192)[0] for tp in (1, 8)
    }
    assert per_gpu[8] > 1.1 * per_gpu[1]
    assert dense_compute_s_per_token(arch, "fp8", b200, 8, calib, 8192)[1] == "roofline"
    rtx = resolve_gpu("RTX-3090")
    flat = {
        tp: tp * dense_compute_s_per_token(arch, "bf16", rtx, tp, default_calib("ampere"), 8192)[0]
        for tp in (1, 8)
    }
    assert flat[8] == pytest.approx(flat[1])
