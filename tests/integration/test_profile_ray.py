"""`planner profile hardware --ray` on a real two-node Ray cluster on loopback.

Both "nodes" (head `node-a`, worker `node-b`, each a `ray start` declaring its custom
resource) live in a network namespace that has only loopback (ENVIRONMENT.md); the CLI runs
inside it too. Each node's profile is measured by a Ray task pinned to that node and written
here. Finalizer: stop Ray, kill what is left in the namespace, delete it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from planner.schemas import load_profile

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

HEAD_PORT = 6392


def _run(
    cmd: list[str], timeout: float = 180, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def ray_netns():
    """A loopback-only network namespace; Ray stopped and the namespace deleted at the end."""
    pytest.importorskip("ray")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create a network namespace")
    name = f"planner-prof-{uuid.uuid4().hex[:8]}"
    if _run(["ip", "netns", "add", name]).returncode != 0:
        pytest.skip("cannot create a network namespace")
    ray = str(Path(sys.executable).with_name("ray"))
    try:
        _run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"])
        yield name
    finally:
        _run(["ip", "netns", "exec", name, ray, "stop", "--force"])
        for pid in _run(["ip", "netns", "pids", name]).stdout.split():  # started by this test
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _run(["ip", "netns", "delete", name])


def test_hardware_profile_on_every_node_through_ray(ray_netns, tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    ray = str(Path(sys.executable).with_name("ray"))
    ns = ["ip", "netns", "exec", ray_netns]
    common = ["--disable-usage-stats", "--object-store-memory=200000000", "--num-cpus=1",
              "--node-ip-address=127.0.0.1"]  # fmt: skip
    for args in (
        [
            "--head",
            f"--port={HEAD_PORT}",
            "--include-dashboard=false",
            "--resources=" + json.dumps({"node-a": 1}),
        ],
        [f"--address=127.0.0.1:{HEAD_PORT}", "--resources=" + json.dumps({"node-b": 1})],
    ):
        r = _run([*ns, ray, "start", *args, *common], env=env)
        assert r.returncode == 0, r.stderr[-2000:]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "kind: cluster\nnodes:\n"
        "- {name: node-a, cpu_memory_gib: 8, gpus: [{type: cpu, count: 1}]}\n"
        "- {name: node-b, cpu_memory_gib: 8, gpus: [{type: cpu, count: 1}]}\n"
    )
    out = tmp_path / "profiles"
    r = _run(
        [*ns, sys.executable, "-m", "planner.cli.main", "profile", "hardware", "--ray", "--cluster", str(cluster),
         "--device", "cpu", "--quick", "-o", str(out), "--json"],
        timeout=400,
        env={**env, "RAY_ADDRESS": f"127.0.0.1:{HEAD_PORT}"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    written = json.loads(r.stdout)["written"]
    assert sorted(Path(p).name for p in written) == ["node-a-cpu.yaml", "node-b-cpu.yaml"]
    for p in written:
        prof = load_profile(p)
        assert prof.hardware.gemm_tflops["bf16"].median > 0
        assert prof.hardware.ram_gbps is not None and prof.hardware.disk_read_gbps is not None
