"""`planner profile import` (vLLM bench JSON, the serving-runs CSV) and `profile calibrate`
fitting the closed loop of imported runs."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest
import yaml
from cli_helpers import run_cli

from planner.catalog.gpus import resolve_gpu
from planner.catalog.models import resolve_arch_name
from planner.optimizer.perf import benchmark_loop, default_calib, instance_perf

MODEL = "Llama-3.1-8B-Instruct"


def _vllm_result(path, **over):
    doc = {
        "model_id": f"meta-llama/{MODEL}", "max_concurrency": 8, "completed": 100,
        "total_input_tokens": 102400, "total_output_tokens": 25600,
        "mean_ttft_ms": 120.0, "mean_tpot_ms": 14.0, "median_ttft_ms": 110.0,
    }  # fmt: skip
    doc.update(over)
    path.write_text(json.dumps(doc))
    return path


def test_import_vllm_bench_json(tmp_path, capsys):
    f = _vllm_result(tmp_path / "run.json")
    argv = ["profile", "import", str(f), "--gpu", "h100-sxm", "--node", "n1"]
    code, _, err = run_cli([*argv, "--out", str(tmp_path / "p"), "--json"], capsys)
    assert code == 0, err
    prof = yaml.safe_load((tmp_path / "p" / "n1-H100-SXM.yaml").read_text())
    (run,) = prof["engine"]
    assert run["model"] == MODEL and run["arch"]["num_layers"] == 32
    (d,) = run["decode"]
    assert d["concurrency"] == 8 and d["prompt_tokens"] == 1024 and d["output_tokens"] == 256
    assert d["tpot_s"]["median"] == pytest.approx(0.014)
    assert d["ttft_s"]["median"] == pytest.approx(0.12)
    # importing the same file again replaces its run
    assert run_cli([*argv, "--out", str(tmp_path / "p")], capsys)[0] == 0
    assert len(yaml.safe_load((tmp_path / "p" / "n1-H100-SXM.yaml").read_text())["engine"]) == 1


def test_import_rejects_an_open_loop_run(tmp_path, capsys):
    f = _vllm_result(tmp_path / "rate.json", max_concurrency=None)
    code, _, err = run_cli(
        ["profile", "import", str(f), "--gpu", "L40S", "--out", str(tmp_path)], capsys
    )
    assert code == 2 and "max_concurrency" in err and "--concurrency" in err
    assert not list(tmp_path.glob("*.yaml"))  # nothing written


def _write_runs(path, gpu, truth, tps, extra=()):
    """Serving-runs CSV rows of MODEL on `gpu` at each TP of `tps` as the perf model predicts
    them under `truth` (a Calib), then the rows `extra`."""
    cols = ["model_path", "system", "precision", "isl", "osl", "batch_size", "tp_size",
            "silicon_ttft_ms", "silicon_tpot_ms"]  # fmt: skip
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for tp in tps:
            perf = instance_perf(
                resolve_arch_name(MODEL), "bf16", gpu, tp, interconnect="nvlink", calib=truth
            )
            for isl in (512, 4096):
                for c in (1, 4, 16, 64):
                    r = benchmark_loop(perf, isl, 256, c)
                    w.writerow([f"meta-llama/{MODEL}", "h100_sxm", "bf16", isl, 256, c, tp,
                                r.ttft_s * 1e3, r.tpot_s * 1e3])  # fmt: skip
        w.writerows(extra)


def _import_and_calibrate(f, out, capsys) -> dict:
    """`profile import` of `f` as H100-SXM into `out`, then `profile calibrate --json`'s
    calibration."""
    code, _, err = run_cli(["profile", "import", str(f), "--gpu", "H100-SXM", "--node", "n1",
                         "--out", str(out)], capsys)  # fmt: skip
    assert code == 0, err
    code, text, err = run_cli(["profile", "calibrate", str(out), "--json"], capsys)
    assert code == 0, err
    (res,) = json.loads(text)
    return res["calibration"]


def test_calibrate_recovers_the_factors_of_imported_serving_runs(tmp_path, capsys):
    """Runs the model itself generates with known factors (bandwidth 0.6, request overhead
    50 ms, step overhead 300 us): importing them and calibrating gives those factors back."""
    gpu = resolve_gpu("H100-SXM")
    truth = dataclasses.replace(
        default_calib("hopper"),
        bandwidth_efficiency=0.6,
        prefill_overhead_s=0.05,
        step_overhead_s=3e-4,
    )
    f = tmp_path / "runs.csv"
    other_gpu = [f"meta-llama/{MODEL}", "b200_sxm", "bf16", 512, 256, 1, 1, 1.0, 1.0]
    _write_runs(f, gpu, truth, (1,), extra=[other_gpu])
    cal = _import_and_calibrate(f, tmp_path / "p", capsys)
    assert cal["bandwidth_efficiency"] == pytest.approx(0.6, rel=0.1)
    assert cal["prefill_overhead_s"] == pytest.approx(0.05, rel=0.15)
    assert cal["residual_rel"] < 0.03
    assert cal["source"].startswith("closed-loop fit (8 imported")
    assert any("runs.csv" in r for r in cal["runs"])  # the calibration names its runs
    assert "nvlink_efficiency" not in cal  # one GPU per run: no all-reduce to fit


def test_calibrate_fits_the_all_reduces_of_runs_at_several_tp(tmp_path, capsys):
    """Runs at TP 1, 2 and 4 whose all-reduces take twice the shipped time (NVLink at half
    the efficiency, twice the latency): the calibration finds that link, and the plan's
    perf model (`calib_from_profile`) predicts the runs from it. A fit without the factor
    (the shipped link) would leave the TP 4 runs' error to the other factors."""
    from planner.optimizer.perf import calib_from_profile
    from planner.schemas.profile import Profile

    gpu = resolve_gpu("H100-SXM")
    base = default_calib("hopper")
    truth = dataclasses.replace(
        base,
        nvlink_efficiency=base.nvlink_efficiency / 2,
        nvlink_latency_s=base.nvlink_latency_s * 2,
    )
    f = tmp_path / "runs.csv"
    _write_runs(f, gpu, truth, (1, 2, 4))
    out = tmp_path / "p"
    cal = _import_and_calibrate(f, out, capsys)
    assert cal["nvlink_efficiency"] == pytest.approx(truth.nvlink_efficiency, rel=0.2)
    assert cal["nvlink_latency_s"] == pytest.approx(truth.nvlink_latency_s, rel=0.2)
    assert "link_efficiency" not in cal  # the runs used NVLink
    assert "allreduce_scale x" in cal["source"]
    assert cal["residual_rel"] < 0.03
    (path,) = out.glob("*.yaml")
    fitted = calib_from_profile(Profile.model_validate(yaml.safe_load(path.read_text())))
    assert fitted.nvlink_efficiency == pytest.approx(cal["nvlink_efficiency"])


def test_the_all_reduce_factor_keeps_every_link_within_the_profile_schema():
    # the fit's lowest factor on a generation's shipped link constants still writes a
    # Calibration the schema accepts (efficiency <= 2)
    from planner.optimizer.perf.calib import _ARCH_DEFAULTS, with_allreduce_scale
    from planner.optimizer.perf.calib_loop import ALLREDUCE_BOUNDS
    from planner.schemas.profile import Calibration

    for arch in [*_ARCH_DEFAULTS, "unknown"]:
        for scale in ALLREDUCE_BOUNDS:
            c = with_allreduce_scale(default_calib(arch), scale)
            Calibration(
                nvlink_efficiency=c.nvlink_efficiency,
                nvlink_latency_s=c.nvlink_latency_s,
                link_efficiency=c.link_efficiency,
                link_latency_s=c.link_latency_s,
            )
