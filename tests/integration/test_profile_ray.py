"""`planner profile hardware|engine --ray` on a real two-node Ray cluster on loopback.

Both "nodes" (head `node-a`, worker `node-b`, each a `ray start` declaring its custom
resource) live in a network namespace that has only loopback (docs/environment.md); the CLI runs
inside it too. Each node's profile is measured by a Ray task pinned to that node and written
here. Finalizer: kill what is left in the namespace (not `ray stop`: machine-wide), delete it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from netns import loopback_namespace

from planner.schemas import load_profile
from planner.tinymodel import tiny_arch

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

HEAD_PORT = 6392
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
RAY = str(Path(sys.executable).with_name("ray"))


def _run(
    cmd: list[str], timeout: float = 180, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def ray_ns(tmp_path_factory):
    """A loopback-only namespace running a two-node Ray cluster; torn down at the end."""
    pytest.importorskip("ray")
    with loopback_namespace("planner-prof") as name:
        ns = ["ip", "netns", "exec", name]
        common = [
            "--disable-usage-stats",
            "--object-store-memory=200000000",
            "--num-cpus=1",
            "--node-ip-address=127.0.0.1",
        ]
        for args in (
            [
                "--head",
                f"--port={HEAD_PORT}",
                "--include-dashboard=false",
                "--resources=" + json.dumps({"node-a": 1}),
            ],
            [f"--address=127.0.0.1:{HEAD_PORT}", "--resources=" + json.dumps({"node-b": 1})],
        ):
            r = _run([*ns, RAY, "start", *args, *common], env=ENV)
            assert r.returncode == 0, r.stderr[-2000:]
        cluster = tmp_path_factory.mktemp("ray") / "cluster.yaml"
        cluster.write_text(
            "kind: cluster\nnodes:\n"
            "- {name: node-a, cpu_memory_gib: 8, gpus: [{type: cpu, count: 1}]}\n"
            "- {name: node-b, cpu_memory_gib: 8, gpus: [{type: cpu, count: 1}]}\n"
        )
        yield ns, cluster


def _planner(ns: list[str], args: list[str], timeout: float = 600) -> dict:
    r = _run(
        [*ns, sys.executable, "-m", "planner.cli.main", *args],
        timeout=timeout,
        env={**ENV, "RAY_ADDRESS": f"127.0.0.1:{HEAD_PORT}"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def test_hardware_profile_on_every_node_through_ray(ray_ns, tmp_path):
    ns, cluster = ray_ns
    out = tmp_path / "profiles"
    got = _planner(
        ns,
        [
            "profile",
            "hardware",
            "--ray",
            "--cluster",
            str(cluster),
            "--device",
            "cpu",
            "--quick",
            "-o",
            str(out),
            "--json",
        ],
    )
    written = got["written"]
    assert sorted(Path(p).name for p in written) == ["node-a-cpu.yaml", "node-b-cpu.yaml"]
    for p in written:
        prof = load_profile(p)
        assert prof.hardware.gemm_tflops["bf16"].median > 0
        assert prof.hardware.ram_gbps is not None and prof.hardware.disk_read_gbps is not None


@pytest.mark.vllm
def test_engine_profile_on_node_b_through_ray(ray_ns, tmp_path, tiny_model_dir, require_vllm):
    ns, cluster = ray_ns
    models = tmp_path / "models.yaml"
    models.write_text(
        yaml.safe_dump(
            {
                "kind": "models",
                "models": [
                    {
                        "name": "tiny",
                        "max_context": 512,
                        "architecture": tiny_arch(),
                        "variants": [
                            {"name": "bf16", "quantization": "bf16", "path": str(tiny_model_dir)}
                        ],
                    }
                ],
            }
        )
    )
    out = tmp_path / "profiles"
    got = _planner(
        ns,
        [
            "profile",
            "engine",
            "--ray",
            "--cluster",
            str(cluster),
            "--node",
            "node-b",
            "--models",
            str(models),
            "--device",
            "cpu",
            "--quick",
            "--enforce-eager",
            "-o",
            str(out),
            "--json",
        ],
    )
    assert [Path(p).name for p in got["written"]] == ["node-b-cpu.yaml"]
    run = load_profile(out / "node-b-cpu.yaml").engine[0]
    assert run.status == "ok", run.detail[-1000:]
    assert run.prefill and run.decode and run.cold_start_s > 0
