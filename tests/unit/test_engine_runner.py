"""The process runner of planner.engines.process with stand-in servers (plain Python, no vLLM)."""

from __future__ import annotations

import socket
import sys
import textwrap
import time

import pytest

from planner import control_http
from planner.engines import ports, process
from planner.engines.vllm import ENGINE as VLLM
from planner.errors import LaunchError

# Serves 200 on every GET after `delay` seconds, and forks a child that shares its group.
FAKE = textwrap.dedent("""
    import http.server, os, sys, time
    port, delay = int(sys.argv[1]), float(sys.argv[2])
    if os.fork() == 0:
        time.sleep(600)
        os._exit(0)
    time.sleep(delay)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
        def log_message(self, *a):
            pass
    print("vllm fake server up", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_start_wait_ready_and_stop_the_whole_group(tmp_path) -> None:
    port = _port()
    log = tmp_path / "s.log"
    proc = process.start_server(
        [sys.executable, "-c", FAKE, str(port), "0.3"], {"X_TEST": "1"}, log
    )
    try:
        waited = process.wait_ready(VLLM, "127.0.0.1", port, proc, log, timeout_s=30, poll_s=0.05)
        assert waited >= 0
        assert not ports.is_port_free(port)
        assert control_http.answers_ok("127.0.0.1", port, "/health")
        assert process.group_alive(proc.pid)
    finally:
        process.stop_server(proc, timeout_s=5)
    assert proc.poll() is not None
    assert not process.group_alive(proc.pid)  # the forked child went too
    assert ports.is_port_free(port)
    assert "fake server up" in log.read_text()


def test_exit_during_startup_is_classified(tmp_path) -> None:
    log = tmp_path / "s.log"
    script = "import sys; print('OSError: [Errno 98] Address already in use'); sys.exit(1)"
    proc = process.start_server([sys.executable, "-c", script], {}, log)
    with pytest.raises(LaunchError) as ei:
        process.wait_ready(VLLM, "127.0.0.1", _port(), proc, log, timeout_s=30, poll_s=0.05)
    assert ei.value.reason == "port_in_use"
    assert "Address already in use" in ei.value.log_tail


def test_timeout_then_stop_by_pid(tmp_path) -> None:
    port = _port()
    log = tmp_path / "s.log"
    proc = process.start_server([sys.executable, "-c", FAKE, str(port), "60"], {}, log)
    try:
        with pytest.raises(LaunchError) as ei:
            process.wait_ready(VLLM, "127.0.0.1", port, proc.pid, log, timeout_s=0.5, poll_s=0.05)
        assert ei.value.reason == "timeout"
    finally:
        process.stop_server(proc.pid, timeout_s=5)
    deadline = time.monotonic() + 5
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is not None


def test_pid_checks() -> None:
    import os

    assert process.pid_alive(os.getpid())
    assert not process.pid_alive(0)
    assert not process.pid_is_server(
        os.getpid(), 1, VLLM.process_marker
    )  # pytest is no vllm server


def test_a_listener_left_by_the_same_instance_is_recognised(tmp_path):
    """A server that an interrupted start left on the port is the same instance when it logs to
    the same file (apply replaces it); a listener with another log is foreign (PortHeldError)."""
    import socket
    import sys
    import time

    from planner.engines import ports, process

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "a0.log"
    code = (
        "import socket, time; s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)"
    )
    proc = process.start_server([sys.executable, "-c", code], {}, log)
    try:
        deadline = time.monotonic() + 20
        while (holder := ports.port_holder(port)) is None or holder.pid is None:
            assert time.monotonic() < deadline, "the listener did not come up"
            time.sleep(0.1)
        assert holder.pid == proc.pid
        assert process.is_same_instance(holder, log)
        assert not process.is_same_instance(holder, tmp_path / "b0.log")
    finally:
        process.stop_server(proc, 5.0)


def test_a_listener_on_another_address_is_not_in_the_way(tmp_path):
    """A node agent's relay listens on the node's address at its engine's port while the engine
    holds loopback: the engine's port check must look at loopback (and wildcard) listeners only
    (the Ray engine-access test failed with 'port P is held by PID N (ray::NodeAgent...)')."""
    import socket

    from planner.engines import ports

    with socket.socket() as relay:
        relay.bind(("127.0.0.2", 0))  # another local address stands in for the node's
        relay.listen()
        port = relay.getsockname()[1]
        assert ports.port_holder(port, "127.0.0.1") is None
        assert ports.port_holder(port, "127.0.0.2") is not None
    with socket.socket() as anywhere:
        anywhere.bind(("0.0.0.0", 0))
        anywhere.listen()
        port = anywhere.getsockname()[1]
        assert ports.port_holder(port, "127.0.0.1") is not None


def test_a_start_that_fills_the_disk_says_so_from_a_long_log(tmp_path) -> None:
    """Issue 42 item 5. Before: `unknown` (the cause sat 133 KB up a log, before the
    traceback; only the last 64 KB were read, and no pattern knew a full disk)."""
    log = tmp_path / "s.log"
    script = (
        "import sys; print('OSError: [Errno 28] No space left on device: /hf/model.safetensors');"
        "print('  File \"x.py\", line 1, in f\\n' * 6000); sys.exit(1)"
    )  # about 150 KB of traceback after the cause
    proc = process.start_server([sys.executable, "-c", script], {}, log)
    with pytest.raises(LaunchError) as ei:
        process.wait_ready(VLLM, "127.0.0.1", _port(), proc, log, timeout_s=30, poll_s=0.05)
    assert log.stat().st_size > 130_000
    assert ei.value.reason == "disk_full" and "free space" in (ei.value.fix or "")


def test_a_process_created_after_the_moment_meant_reused_the_pid() -> None:
    """The pid-reuse guard (psutil's create_time): this process runs, but it is not one that
    was already running an hour before it started."""
    import os
    import time

    import psutil

    born_s = psutil.Process().create_time()
    assert process.pid_alive(os.getpid(), running_at=born_s)
    assert process.pid_alive(os.getpid(), running_at=time.time())
    assert not process.pid_alive(os.getpid(), running_at=born_s - 3600)


def test_a_zombie_is_dead() -> None:
    import subprocess
    import sys
    import time

    import psutil

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.05)
        assert not process.pid_alive(child.pid)  # exited, not yet reaped
        assert not process.pid_is_server(child.pid, 1, VLLM.process_marker)
    finally:
        child.wait()
