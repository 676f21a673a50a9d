"""One HTTP client for every control call (issue 43 item 7): planner/control_http.py owns
them, with one timeout table and one error message naming the call, the server and the cause.
Real loopback servers (http.server) stand in for an engine's control routes."""

from __future__ import annotations

import ast
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from planner import control_http
from planner.adjuster.backends.base import Handle
from planner.adjuster.backends.local import LocalBackend
from planner.engines.vllm import ENGINE as VLLM
from planner.errors import ApplyError, ControlCallError
from planner.profiler.engine_client import Client

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("planner", "cli", "app", "profiler", "optimizer", "adjuster")
HTTP_CLIENTS = {"urllib.request", "http.client", "httpx", "requests", "urllib3", "aiohttp"}
# who may import an HTTP client besides control_http, and why (docs/architecture.md)
ALLOWED = {
    # the gateway's data path: its own async client and connection pools
    "adjuster/gateway/": {"aiohttp"},
    "adjuster/backends/relay.py": {"aiohttp"},  # a node's relay forwards the data path too
    # timed completions: measurement traffic (control calls use control_http there)
    "profiler/engine_client.py": {"httpx"},
    "planner/control_http.py": {"http.client"},
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_no_module_but_control_http_imports_an_http_client_for_control_calls():
    found: dict[str, set[str]] = {}
    for d in PACKAGE_DIRS:
        for path in (ROOT / d).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            clients = {
                m for m in _imports(path) for c in HTTP_CLIENTS if m == c or m.startswith(c + ".")
            }
            allowed = set().union(*(v for k, v in ALLOWED.items() if rel.startswith(k)))
            if clients - allowed:
                found[rel] = clients - allowed
    assert found == {}, f"control calls go through planner/control_http.py: {found}"


class _Engine(BaseHTTPRequestHandler):
    """Answers the routes the tests need, and records each request's route and key."""

    seen: ClassVar[list[tuple[str, str, str]]] = []

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        if self.path == "/is_sleeping":
            self._answer(200, json.dumps({"is_sleeping": True}).encode())
        else:
            self._answer(200 if self.path == "/health" else 404, b"ok")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        self.seen.append(("POST", self.path, self.headers.get("Authorization", "")))
        if self.path.startswith("/sleep"):
            self._answer(500, b'{"error": "CUDA out of\n memory"}')
        else:
            self._answer(200, b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def engine() -> Iterator[int]:
    _Engine.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_call_without_answer_names_method_route_server_and_cause():
    port = _free_port()
    with pytest.raises(ControlCallError) as e:
        control_http.post("127.0.0.1", port, "/wake_up", purpose="wake")
    assert str(e.value) == (
        f"POST /wake_up on 127.0.0.1:{port} failed: connection refused (is the server running?)"
    )
    assert isinstance(e.value, ApplyError) and e.value.status is None
    assert control_http.answers_ok("127.0.0.1", port, "/health") is False


def test_a_call_that_times_out_says_after_how_long():
    with socket.socket() as s:  # listens, never answers
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ControlCallError) as e:
            control_http.get("127.0.0.1", port, "/health", purpose="health", timeout_s=0.2)
    assert str(e.value) == f"GET /health on 127.0.0.1:{port} failed: no answer within 0.2 s"


def test_every_backend_call_uses_the_one_client_and_message(engine):
    """LocalBackend's sleep, wake, health and is-sleeping, and the profiler's sleep/wake and
    metrics calls: one wording of a refused answer, the instance's key on every call."""
    be = LocalBackend("cuda")
    h = Handle(instance_id="m-0", node="local", host="127.0.0.1", port=engine, pid=1, secret="k1")
    with pytest.raises(ControlCallError) as e:
        be.sleep(h, 1)
    assert str(e.value) == (
        f'm-0: POST /sleep?level=1 on 127.0.0.1:{engine} failed: answered 500 ({{"error": '
        '"CUDA out of memory"})'
    )
    be.wake(h, 2)  # wake, then the reload after a level 2
    assert be.is_sleeping(h) is True
    client = Client(engine, "m", 5.0, secret="k1", engine=VLLM)
    try:
        took_s, status = client.post_s("/sleep?level=1", purpose="sleep")
        assert status == 500 and took_s >= 0
        assert client.metrics() == ""  # a 404 reads as no metrics
    finally:
        client.close()
    posts = [(m, p) for m, p, _ in _Engine.seen]
    assert posts == [
        ("POST", "/sleep?level=1"),
        ("POST", "/wake_up"),
        ("POST", "/collective_rpc"),
        ("GET", "/is_sleeping"),
        ("POST", "/sleep?level=1"),
        ("GET", "/metrics"),
    ]
    assert {key for _, _, key in _Engine.seen} == {"Bearer k1"}


def test_the_timeout_table_covers_every_purpose():
    assert set(control_http.TIMEOUTS_S) == set(control_http.Purpose.__args__)
