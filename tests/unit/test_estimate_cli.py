"""`planner estimate` and `planner catalog` through the CLI entry point."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli

KEYS = {
    "weights_gib_per_gpu",
    "kv_bytes_per_token",
    "max_kv_tokens",
    "ttft_s",
    "tpot_s",
    "output_tokens_per_s",
    "cold_start_s",
    "wake_host_s",
    "wake_disk_s",
}


def test_single_json(capsys):
    code, out, _ = run_cli(
        ["estimate", "--model", "Llama-3.1-8B-Instruct", "--gpu", "L40S", "--json"], capsys
    )
    assert code == 0
    r = json.loads(out)
    assert set(r) >= KEYS
    assert r["kv_bytes_per_token"] == 131072
    assert 14 < r["weights_gib_per_gpu"] < 15.5
    assert r["ttft_s"] > 0 and r["tpot_s"] > 0 and r["max_kv_tokens"] > 0


def test_single_human(capsys):
    code, out, _ = run_cli(
        [
            "estimate",
            "--model",
            "Qwen/Qwen3-32B",
            "--gpu",
            "A100-80GB-PCIe",
            "--tp",
            "2",
            "--quantization",
            "fp8",
            "--concurrency",
            "8",
        ],
        capsys,
    )
    assert code == 0 and "TPOT" in out


def test_config_json_model(tmp_path, capsys):
    cfg = {
        "model_type": "qwen3",
        "num_hidden_layers": 36,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 12288,
        "vocab_size": 151936,
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    code, out, _ = run_cli(["estimate", "--model", str(p), "--gpu", "RTX-4090", "--json"], capsys)
    assert code == 0 and json.loads(out)["kv_bytes_per_token"] == 2 * 8 * 128 * 36 * 2


def test_tp_not_dividing_heads(capsys):
    code, _, err = run_cli(
        ["estimate", "--model", "Qwen3-32B", "--gpu", "L40S", "--tp", "3"], capsys
    )
    assert code == 2 and "--tp" in err and "fix:" in err


def test_unknown_gpu(capsys):
    code, _, err = run_cli(["estimate", "--model", "Qwen3-8B", "--gpu", "A100-90GB"], capsys)
    assert code == 2 and "did you mean" in err


def test_does_not_fit_gives_null_latency(capsys):
    code, out, _ = run_cli(
        ["estimate", "--model", "Llama-3.1-70B", "--gpu", "RTX-3090", "--json"], capsys
    )
    r = json.loads(out)
    assert code == 0 and r["fits"] is False and r["ttft_s"] is None


def test_batch_in_row_order(tmp_path, capsys):
    lines = ["model,gpu,tp,quantization,kv_cache_dtype,input_len,output_len,concurrency"]
    rows = [
        ("Qwen3-8B", "L40S", 1, "bf16", "auto", 512, 128, 1),
        ("Qwen3-32B", "H100-SXM", 2, "fp8", "fp8", 2048, 256, 16),
        ("gpt-oss-20b", "RTX-4090", 1, "mxfp4", "auto", 1000, 100, 4),
    ] * 10
    lines += [",".join(map(str, r)) for r in rows]
    p = tmp_path / "s.csv"
    p.write_text("\n".join(lines) + "\n")
    code, out, _ = run_cli(["estimate", "--batch", str(p), "--json"], capsys)
    assert code == 0
    res = json.loads(out)
    assert [r["model"] for r in res] == [r[0] for r in rows]
    assert all(set(r) >= KEYS for r in res)
    assert res[1]["kv_bytes_per_token"] == 262144 / 2


def test_batch_defaults_and_bad_row(tmp_path, capsys):
    p = tmp_path / "s.csv"
    p.write_text("model,gpu\nQwen3-8B,L4\nQwen3-8B,L4X\n")
    code, _, err = run_cli(["estimate", "--batch", str(p), "--json"], capsys)
    assert code == 2 and "row 2.gpu" in " ".join(err.split())


def test_batch_unknown_column(tmp_path, capsys):
    p = tmp_path / "s.csv"
    p.write_text("model,gpu,flavour\nQwen3-8B,L4,x\n")
    code, _, err = run_cli(["estimate", "--batch", str(p)], capsys)
    assert code == 2 and "flavour" in err


def test_missing_model_flag(capsys):
    code, _, err = run_cli(["estimate", "--gpu", "L4"], capsys)
    assert code == 2 and "--model" in err


@pytest.mark.parametrize("what", ["gpus", "models"])
def test_catalog_json_and_table(what, capsys):
    code, out, _ = run_cli(["catalog", what, "--json"], capsys)
    assert code == 0 and len(json.loads(out)) >= 14
    code, out, _ = run_cli(["catalog", what], capsys)
    assert code == 0 and "catalog" in out
    # every row names its source: a column on a wide console (and in a pipe), a reference
    # under the table at 80 columns
    assert "https://" in out and ("source" in out or ("src" in out and "[1] " in out))


def test_profiles_replace_defaults(tmp_path, capsys):
    argv = ["estimate", "--model", "Qwen3-8B", "--gpu", "L40S", "--input-len", "4000", "--json"]
    _, out, _ = run_cli(argv, capsys)
    base = json.loads(out)
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "node-a-L40S.yaml").write_text(
        "kind: profile\nnode: node-a\ngpu_type: L40S\n"
        "calibration: {compute_efficiency: 0.2, h2d_gbps: 5.0}\n"
    )
    _, out, _ = run_cli([*argv, "--profiles", str(d)], capsys)
    slow = json.loads(out)
    assert slow["ttft_s"] > 2 * base["ttft_s"]
    assert slow["wake_host_s"] > base["wake_host_s"]
    assert slow["weights_gib_per_gpu"] == base["weights_gib_per_gpu"]


@pytest.mark.parametrize(
    "gpu,extra,seqs,tokens",
    [
        ("B200-SXM", [], 1024, 16384),  # >= 160 GiB: vLLM's largest defaults
        ("H100-SXM", [], 1024, 8192),
        ("H100-SXM", ["--entry-point", "offline"], 1024, 16384),  # the LLM class
        ("A100-80GB-SXM", [], 256, 2048),  # A100s keep the small budget
        ("L40S", [], 256, 2048),
        ("L40S", ["--max-num-seqs", "8", "--max-num-batched-tokens", "512"], 8, 512),
    ],
)
def test_json_says_which_engine_limits_it_assumed(gpu, extra, seqs, tokens, capsys):
    argv = ["estimate", "--model", "Llama-3.1-8B-Instruct", "--gpu", gpu, "--json", *extra]
    code, out, _ = run_cli(argv, capsys)
    r = json.loads(out)
    assert code == 0
    assert (r["max_num_seqs"], r["max_num_batched_tokens"]) == (seqs, tokens)


def test_unknown_entry_point_and_interconnect(capsys):
    base = ["estimate", "--model", "Qwen3-8B", "--gpu", "L4"]
    code, _, err = run_cli([*base, "--entry-point", "llm"], capsys)
    assert code == 2 and "--entry-point" in err and "serve" in err
    code, _, err = run_cli([*base, "--interconnect", "infiniband"], capsys)
    assert code == 2 and "interconnect" in err


def test_nvfp4_estimates_on_blackwell(capsys):
    argv = ["estimate", "--model", "Kimi-K2.5", "--gpu", "B200-SXM", "--tp", "8"]
    code, out, _ = run_cli([*argv, "--quantization", "nvfp4", "--json"], capsys)
    r = json.loads(out)
    assert code == 0 and r["fits"] and r["interconnect"] == "nvlink"
    assert r["tpot_s"] < 0.05


def test_json_echoes_the_scenario_and_its_clients_burst_share(capsys):
    """A benchmark's fixed-length clients stay partly in step: the TTFT is the closed loop's
    with the fitted burst share, which the JSON names (as it names the scenario)."""
    from planner.catalog.gpus import resolve_gpu
    from planner.catalog.models import resolve_arch_name
    from planner.optimizer.perf import BURST_SHARE, CHAIN_SHARE, closed_loop, instance_perf

    argv = ["estimate", "--model", "Qwen3-8B", "--gpu", "H100-SXM", "--concurrency", "32"]
    code, out, _ = run_cli([*argv, "--input-len", "2048", "--json"], capsys)
    r = json.loads(out)
    assert code == 0
    assert (r["input_len"], r["output_len"], r["concurrency"]) == (2048, 256, 32)
    assert (r["burst_share"], r["chain_share"]) == (BURST_SHARE, CHAIN_SHARE)
    perf = instance_perf(resolve_arch_name("Qwen3-8B"), "bf16", resolve_gpu("H100-SXM"))
    loop = closed_loop(perf, 2048, 256, 32, rounds=1 / BURST_SHARE, chained=CHAIN_SHARE)
    steady = closed_loop(perf, 2048, 256, 32)
    # the JSON rounds times to the microsecond
    assert r["ttft_s"] == pytest.approx(loop.ttft_s, abs=1e-6) and loop.ttft_s > steady.ttft_s
    assert r["tpot_s"] == pytest.approx(steady.tpot_s, abs=1e-6)


def test_the_command_and_its_service_give_the_same_estimates(tmp_path, capsys):
    """Issue 45 item 1: the benches call the service under the command (planner.app), so the
    two must agree to the byte: the command parses, calls the service and renders."""
    from planner.app.estimate import EngineSettings, estimate

    batch = tmp_path / "b.csv"
    batch.write_text("model,gpu,tp,input_len\nQwen3-8B,L40S,,2000\nQwen3-32B,H100-SXM,2,100\n")
    code, out, _ = run_cli(["estimate", "--batch", str(batch), "--json"], capsys)
    assert code == 0
    by_service = [r.to_json() for r in estimate(batch, EngineSettings())]
    assert json.loads(out) == json.loads(json.dumps(by_service))
    assert [r["tp"] for r in by_service] == [1, 2]  # an empty cell takes the flag's default
