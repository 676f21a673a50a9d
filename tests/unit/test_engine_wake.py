"""Issue 42 item 2: the engine owns its wake sequence per sleep level, and its post-wake check.

No GPU here, so vLLM's sleep mode is played by a fake server that behaves as vLLM does: after a
level-2 sleep it has dropped its weights, and `POST /wake_up` alone leaves it answering
garbage until `POST /collective_rpc {"method": "reload_weights"}` reads them again. The
runtime's wake (Controller over the local backend's HTTP calls) must reload before traffic.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from planner import control_http
from planner.adjuster.backends.base import Handle
from planner.adjuster.backends.local import LocalBackend
from planner.adjuster.control import Controller
from planner.adjuster.state import StateStore
from planner.engines.base import get_engine
from planner.schemas.plan import Plan


class FakeVllm(ThreadingHTTPServer):
    """vLLM's sleep-mode routes and a completion that shows whether the weights are there."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.weights = "loaded"  # loaded | host (level 1) | gone (level 2)
        self.sleeping = False
        self.seen: list[str] = []  # POST paths, in order

    def __enter__(self) -> FakeVllm:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: FakeVllm

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, doc: dict) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200, {"is_sleeping": self.server.sleeping})

    def do_POST(self) -> None:
        srv = self.server
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        srv.seen.append(self.path)
        if self.path.startswith("/sleep"):
            srv.sleeping = True
            srv.weights = "gone" if self.path.endswith("level=2") else "host"
        elif self.path == "/wake_up":
            srv.sleeping = False
            if srv.weights == "host":
                srv.weights = "loaded"  # level 1 kept them in host RAM
        elif self.path == "/collective_rpc" and body.get("method") == "reload_weights":
            srv.weights = "loaded"
        elif self.path == "/v1/completions":
            text = " Paris" if srv.weights == "loaded" else " zq#"  # garbage without weights
            self._send(200, {"choices": [{"text": text}]})
            return
        self._send(200, {})


class SleepModeBackend(LocalBackend):
    """The local backend with sleep mode (as on CUDA), its one server being the fake."""

    def __init__(self, server: FakeVllm):
        super().__init__("cuda")
        self.server = server

    def start(self, inst, *, model_path: str, served_name: str, log_path: str) -> Handle:
        port = self.server.server_address[1]
        return Handle(inst.id, inst.node, "127.0.0.1", port, pid=1, engine=inst.engine.kind)

    def wait_ready(self, handle: Handle, timeout_s: float) -> None:
        pass

    def is_alive(self, handle: Handle) -> bool:
        return control_http.answers_ok(handle.host, handle.port, "/health", purpose="health")

    def stop(self, handle: Handle, timeout_s: float = 30.0) -> None:
        pass

    def gpu_free_gib(self, node: str, gpus: list[int]) -> dict[int, float] | None:
        return None


def _plan(tier: str, port: int) -> Plan:
    inst = {
        "id": "d0",
        "model": "m",
        "variant": "bf16",
        "node": "n",
        "gpus": [0],
        "tp": 1,
        "tier": tier,
        "port": port,
        "memory_gib": {"weights": 1, "kv": 1, "overhead": 0.5},
    }
    return Plan(selected="p", points=[{"name": "p", "instances": [inst]}])


def _answer(h: Handle) -> str:
    import urllib.request

    req = urllib.request.Request(
        f"http://{h.host}:{h.port}/v1/completions",
        data=b"{}",
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())["choices"][0]["text"]


@pytest.mark.parametrize(
    ("tier", "steps"),
    [
        ("disk", ["/sleep?level=2", "/wake_up", "/collective_rpc"]),
        ("host", ["/sleep?level=1", "/wake_up"]),
    ],
)
def test_a_wake_runs_the_engines_steps_for_its_sleep_level_before_traffic(tmp_path, tier, steps):
    """Before: the runtime posted `/wake_up` alone, so a disk-tier (level-2) wake served
    garbage (vLLM has dropped the weights) where the profiler's timed wake had reloaded them."""
    with FakeVllm() as srv, StateStore(tmp_path) as st:
        ctl = Controller(
            _plan(tier, srv.server_address[1]),
            None,
            SleepModeBackend(srv),
            st,
            model_path_resolver=lambda i: "/m",
        )
        h = ctl.wake("d0", 5)  # started
        assert _answer(h) == " Paris"
        srv.seen.clear()
        ctl.sleep("d0")
        h = ctl.wake("d0", 5)
        assert srv.seen == steps
        assert _answer(h) == " Paris"  # the first request after the wake
        assert st.get("d0").status == "awake"


def test_the_profiler_and_the_runtime_share_the_wake_steps():
    vllm = get_engine("vllm")
    assert vllm.wake_steps(1) == [("/wake_up", None)]
    assert vllm.wake_steps(2) == [("/wake_up", None), vllm.reload_request]
