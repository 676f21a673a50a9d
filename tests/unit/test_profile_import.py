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
        "model_id": f"meta-llama/{MODEL}",
        "max_concurrency": 8,
        "completed": 100,
        "total_input_tokens": 102400,
        "total_output_tokens": 25600,
        "mean_ttft_ms": 120.0,
        "mean_tpot_ms": 14.0,
        "median_ttft_ms": 110.0,
    }
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


def _write_runs(path, gpu, truth, tps, extra=(), models=(MODEL,)):
    """Serving-runs CSV rows of each of `models` on `gpu` at each TP of `tps` as the perf
    model predicts them under `truth` (a Calib), then the rows `extra`."""
    cols = [
        "model_path",
        "system",
        "precision",
        "isl",
        "osl",
        "batch_size",
        "tp_size",
        "silicon_ttft_ms",
        "silicon_tpot_ms",
    ]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for model in models:
            for tp in tps:
                perf = instance_perf(
                    resolve_arch_name(model), "bf16", gpu, tp, interconnect="nvlink", calib=truth
                )
                for isl in (512, 4096):
                    for c in (1, 4, 16, 64):
                        r = benchmark_loop(perf, isl, 256, c)
                        w.writerow(
                            [
                                f"org/{model}",
                                "h100_sxm",
                                "bf16",
                                isl,
                                256,
                                c,
                                tp,
                                r.ttft_s * 1e3,
                                r.tpot_s * 1e3,
                            ]
                        )
        w.writerows(extra)


def _import_and_calibrate(f, out, capsys) -> dict:
    """`profile import` of `f` as H100-SXM into `out`, then `profile calibrate --json`'s
    calibration."""
    code, _, err = run_cli(
        ["profile", "import", str(f), "--gpu", "H100-SXM", "--node", "n1", "--out", str(out)],
        capsys,
    )
    assert code == 0, err
    code, text, err = run_cli(["profile", "calibrate", str(out), "--json"], capsys)
    assert code == 0, err
    (res,) = json.loads(text)
    return res["calibration"]


def _calib_of(out):
    from planner.optimizer.perf import calib_from_profile
    from planner.schemas.profile import Profile

    (path,) = out.glob("*.yaml")
    return calib_from_profile(Profile.model_validate(yaml.safe_load(path.read_text())))


def test_one_models_runs_recover_its_factor_and_leave_another_model_unchanged(tmp_path, capsys):
    """Runs the model itself generates with a known distortion (bandwidth 0.6 against the
    shipped 0.947, request overhead 50 ms, step overhead 300 us): calibrating on them gives
    the distortion back, for that model; another model's prediction on the GPU is unchanged
    (one model's runs cannot tell the GPU's factors from its own error)."""
    gpu = resolve_gpu("H100-SXM")
    base = default_calib("hopper")
    truth = dataclasses.replace(
        base, bandwidth_efficiency=0.6, prefill_overhead_s=0.05, step_overhead_s=3e-4
    )
    f = tmp_path / "runs.csv"
    other_gpu = [f"meta-llama/{MODEL}", "b200_sxm", "bf16", 512, 256, 1, 1, 1.0, 1.0]
    _write_runs(f, gpu, truth, (1,), extra=[other_gpu])
    out = tmp_path / "p"
    cal = _import_and_calibrate(f, out, capsys)
    (mine,) = cal["models"]
    assert mine["model"] == MODEL
    assert base.bandwidth_efficiency * mine["factors"]["bandwidth"] == pytest.approx(0.6, rel=0.1)
    assert base.prefill_overhead_s * mine["factors"]["request_overhead"] == pytest.approx(
        0.05, rel=0.15
    )
    assert cal["residual_rel"] < 0.03
    assert cal["source"].startswith("closed-loop fit (8 imported")
    assert any("runs.csv" in r for r in cal["runs"])  # the calibration names its runs
    assert "nvlink_efficiency" not in cal  # one GPU per run: no all-reduce to fit
    for factor in cal["factors"]:  # each factor reported with its uncertainty or refusal
        assert factor["status"] == "refused" or factor["uncertainty_x"] >= 1
    assert cal["checks"] and all(c["fitted_rel"] < c["prior_rel"] for c in cal["checks"])
    fitted = _calib_of(out)
    for name, bw in (("Qwen2.5-7B-Instruct", base.bandwidth_efficiency), (MODEL, 0.6)):
        arch = resolve_arch_name(name)
        got = instance_perf(arch, "bf16", gpu, 1, interconnect="nvlink", calib=fitted)
        want = instance_perf(
            arch,
            "bf16",
            gpu,
            1,
            interconnect="nvlink",
            calib=dataclasses.replace(base, bandwidth_efficiency=bw),
        )
        assert got.step.dense_weight_read_s == pytest.approx(want.step.dense_weight_read_s, 0.1)
    other = resolve_arch_name("Qwen2.5-7B-Instruct")
    assert instance_perf(other, "bf16", gpu, 1, calib=fitted) == instance_perf(
        other, "bf16", gpu, 1, calib=base
    )


def test_calibrate_fits_the_all_reduces_of_runs_at_several_tp(tmp_path, capsys):
    """Runs at TP 1, 2 and 4 whose all-reduces take twice the shipped time (NVLink at half
    the efficiency, twice the latency): the calibration finds that link, and the plan's
    perf model (`calib_from_profile`) predicts the runs from it. A fit without the factor
    (the shipped link) would leave the TP 4 runs' error to the other factors."""
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
    (mine,) = cal["models"]
    assert mine["factors"]["allreduce_scale"] == pytest.approx(2.0, rel=0.2)
    assert "nvlink_efficiency" not in cal  # one model: its factor, not the GPU's
    assert "allreduce_scale x" in cal["source"]
    assert cal["residual_rel"] < 0.03
    from planner.optimizer.perf.calib import for_model

    fitted = for_model(_calib_of(out), MODEL)
    assert fitted.nvlink_efficiency == pytest.approx(truth.nvlink_efficiency, rel=0.2)
    assert fitted.nvlink_latency_s == pytest.approx(truth.nvlink_latency_s, rel=0.2)


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


def test_two_models_runs_calibrate_the_gpu_checked_leave_one_model_out(tmp_path, capsys):
    """Two models' runs with the same distortion (bandwidth 0.6): the GPU's factor is fitted
    (a third model's prediction moves with it), after a leave-one-model-out check."""
    gpu = resolve_gpu("H100-SXM")
    base = default_calib("hopper")
    truth = dataclasses.replace(base, bandwidth_efficiency=0.6)
    f = tmp_path / "runs.csv"
    _write_runs(f, gpu, truth, (1,), models=(MODEL, "Qwen2.5-7B-Instruct"))
    cal = _import_and_calibrate(f, tmp_path / "p", capsys)
    assert cal["bandwidth_efficiency"] == pytest.approx(0.6, rel=0.1)
    (lomo,) = [c for c in cal["checks"] if c["split"] == "leave one model out"]
    assert lomo["fitted_rel"] < lomo["prior_rel"]
    third = resolve_arch_name("Mistral-7B-Instruct-v0.3")
    got = instance_perf(third, "bf16", gpu, 1, calib=_calib_of(tmp_path / "p"))
    want = instance_perf(third, "bf16", gpu, 1, calib=truth)
    assert got.step.dense_weight_read_s == pytest.approx(want.step.dense_weight_read_s, 0.1)


def test_a_gpu_factor_that_worsens_one_left_out_model_is_refused(tmp_path, capsys):
    """Two models' runs with bandwidth 0.6, a third's at the shipped 0.947: leaving either
    of the first two out, a fitted bandwidth helps, and pooled over the three folds it
    looks better; leaving the third out it is worse. The GPU's bandwidth is refused, the
    reason names the model it hurts, and a fourth model's prediction keeps the prior (each
    model's own factors still fit its runs)."""
    gpu = resolve_gpu("H100-SXM")
    base = default_calib("hopper")
    slow = dataclasses.replace(base, bandwidth_efficiency=0.6)
    _write_runs(tmp_path / "slow.csv", gpu, slow, (1,), models=(MODEL, "Qwen2.5-7B-Instruct"))
    _write_runs(tmp_path / "fast.csv", gpu, base, (1,), models=("Mistral-7B-Instruct-v0.3",))
    out = tmp_path / "p"
    for f in ("slow.csv", "fast.csv"):
        argv = ["profile", "import", str(tmp_path / f), "--gpu", "H100-SXM", "--node", "n1"]
        code, _, err = run_cli([*argv, "--out", str(out)], capsys)
        assert code == 0, err
    code, text, err = run_cli(["profile", "calibrate", str(out), "--json"], capsys)
    assert code == 0, err
    (res,) = json.loads(text)
    cal = res["calibration"]
    assert "bandwidth_efficiency" not in cal
    (bw,) = [f for f in cal["factors"] if f["name"] == "bandwidth" and not f.get("model")]
    assert bw["status"] == "refused" and "Mistral-7B-Instruct-v0.3 left out" in bw["note"]
    mine = {m["model"]: m["factors"] for m in cal["models"]}
    assert base.bandwidth_efficiency * mine[MODEL]["bandwidth"] == pytest.approx(0.6, rel=0.1)
    fourth = resolve_arch_name("Qwen3-8B")
    got = instance_perf(fourth, "bf16", gpu, 1, calib=_calib_of(out))
    assert got.step == instance_perf(fourth, "bf16", gpu, 1, calib=base).step


@pytest.mark.parametrize(
    "hub_id, arch, quant",
    [
        ("Qwen/Qwen3-235B-A22B-FP8", "Qwen3-235B-A22B", "fp8"),
        ("nvidia/Llama-3.1-8B-Instruct-FP8", "Llama-3.1-8B-Instruct", "fp8"),
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen2.5-7B-Instruct", "awq"),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "Qwen2.5-7B-Instruct", "gptq"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "Llama-3.1-8B-Instruct", "fp8"),
        ("openai/gpt-oss-120b", "gpt-oss-120b", None),
    ],
)
def test_hub_ids_resolve_with_their_suffixes(hub_id, arch, quant):
    from planner.catalog.models import resolve_hub_id

    got, q = resolve_hub_id(hub_id)
    assert (got.name, q) == (arch, quant)


def test_import_resolves_hub_ids_and_names_what_cannot_calibrate(tmp_path, capsys):
    """JSON runs whose model ids carry an organisation and a quantization suffix calibrate;
    one that does not fit its GPU and one not in the catalog are kept and named, with why."""
    fp8 = _vllm_result(tmp_path / "a.json", model_id="nvidia/Llama-3.1-8B-Instruct-FP8")
    big = _vllm_result(tmp_path / "b.json", model_id="Qwen/Qwen3-235B-A22B-FP8")
    unknown = _vllm_result(tmp_path / "c.json", model_id="acme/house-model")
    argv = ["profile", "import", fp8, big, unknown, "--gpu", "H200-SXM", "--node", "n1"]
    code, text, err = run_cli([*argv, "--out", tmp_path / "p", "--json"], capsys)
    assert code == 0, err
    a, b, c = json.loads(text)["runs"]
    assert (a["arch"], a["quantization"], a["calibrates"]) == ("Llama-3.1-8B-Instruct", "fp8", True)
    assert (b["arch"], b["quantization"], b["calibrates"]) == ("Qwen3-235B-A22B", "fp8", False)
    assert "does not fit 1 x H200-SXM" in b["reason"]
    assert not c["calibrates"] and "--model" in c["reason"]
    # --model names the architecture on every route: the CSV's too
    f = tmp_path / "runs.csv"
    cols = "model_path,system,precision,isl,osl,batch_size,tp_size,silicon_ttft_ms,silicon_tpot_ms"
    f.write_text(cols + "\nacme/house-model-AWQ,h200_sxm,,512,128,4,1,30,5\n")
    code, text, err = run_cli(
        [
            "profile",
            "import",
            f,
            "--gpu",
            "H200-SXM",
            "--model",
            "Qwen2.5-7B-Instruct",
            "--out",
            tmp_path / "q",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    (run,) = json.loads(text)["runs"]
    # an empty precision is the one the model id names (else bf16), never ''
    assert (run["arch"], run["quantization"], run["calibrates"]) == (
        "Qwen2.5-7B-Instruct",
        "awq",
        True,
    )


def test_runs_the_perf_model_cannot_predict_are_left_out_not_a_crash(tmp_path, capsys):
    """An imported run whose prediction is not finite (Qwen3-235B on one H200: it does not
    fit) is left out of the fit and named, even from a profile older than the import's note."""
    from planner.optimizer.perf.calibration import calibrate
    from planner.schemas.profile import DecodePoint, EngineRun, Profile, Stat

    gpu = resolve_gpu("H200-SXM")
    truth = default_calib("hopper")
    f = tmp_path / "runs.csv"
    _write_runs(f, gpu, truth, (1,))
    code, _, err = run_cli(
        ["profile", "import", f, "--gpu", "H100-SXM", "--node", "n1", "--out", tmp_path / "p"],
        capsys,
    )
    assert code == 0, err
    (path,) = (tmp_path / "p").glob("*.yaml")
    prof = Profile.model_validate(yaml.safe_load(path.read_text()))
    point = DecodePoint(
        concurrency=1,
        prompt_tokens=1024,
        output_tokens=128,
        tpot_s=Stat(median=0.02),
        ttft_s=Stat(median=0.3),
    )
    prof.engine.append(
        EngineRun(
            model="Qwen3-235B-A22B-FP8",
            variant="fp8",
            tp=1,
            quantization="fp8",
            arch=resolve_arch_name("Qwen3-235B-A22B"),
            decode=[point] * 10,
            notes=["imported: old.json"],
        )
    )
    cal = calibrate(prof, gpu, default_calib("hopper"))
    assert any("Qwen3-235B-A22B-FP8 tp1 fp8: 10 point(s)" in e for e in cal.excluded)
    assert cal.residual_rel is not None and cal.residual_rel < 0.05


def test_calibrate_with_no_usable_point_exits_nonzero_with_the_fix(tmp_path, capsys):
    """An import whose runs all fail to resolve leaves nothing to fit: calibrate says so and
    exits 2, and leaves the profile as it was."""
    f = _vllm_result(tmp_path / "a.json", model_id="acme/house-model")
    argv = ["profile", "import", f, "--gpu", "H100-SXM", "--node", "n1", "--out", tmp_path / "p"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "0 of 1 runs can calibrate" in out and "next:" not in out
    (path,) = (tmp_path / "p").glob("*.yaml")
    before = path.read_text()
    code, _, err = run_cli(["profile", "calibrate", path], capsys)
    assert code == 2
    assert "no usable point" in err and "house-model" in err and "--model" in err
    assert path.read_text() == before


def test_estimate_names_per_figure_whether_calibrated_and_from_which_runs(tmp_path, capsys):
    """After a calibration on one model's runs, `planner estimate --json` marks that model's
    TTFT and TPOT calibrated (its factors, the runs), another model's not; memory never."""
    gpu = resolve_gpu("H100-SXM")
    truth = dataclasses.replace(default_calib("hopper"), bandwidth_efficiency=0.6)
    f = tmp_path / "runs.csv"
    _write_runs(f, gpu, truth, (1,))
    _import_and_calibrate(f, tmp_path / "p", capsys)
    got = {}
    for model in (MODEL, "Qwen2.5-7B-Instruct"):
        argv = ["estimate", "--model", model, "--gpu", "H100-SXM", "--profiles", tmp_path / "p"]
        code, text, err = run_cli([*argv, "--json"], capsys)
        assert code == 0, err
        got[model] = json.loads(text)["calibration"]
    mine, other = got[MODEL], got["Qwen2.5-7B-Instruct"]
    for fig in ("ttft_s", "tpot_s"):
        assert mine[fig]["calibrated"] and "bandwidth" in mine[fig]["model_factors"]
        assert any("runs.csv" in r for r in mine[fig]["runs"])
        assert not other[fig]["calibrated"]
    assert not mine["weights_gib_per_gpu"]["calibrated"]
