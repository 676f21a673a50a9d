"""vLLM's sleep mode without a GPU: a fake server that behaves as vLLM does (after a level-2
sleep its weights are gone until `reload_weights`), the local backend over it, and the
one-instance plan the engine and seam tests apply."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from planner import control_http
from planner.adjuster.backends.base import Handle
from planner.adjuster.backends.local import LocalBackend
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


def one_instance_plan(
    port: int, tier: str = "disk", *, iid: str = "s0", kind: str | None = None, extra=()
) -> Plan:
    """A plan of one instance of model m on GPU 0; `kind` (with `extra`) sets its engine."""
    inst = {
        "id": iid,
        "model": "m",
        "variant": "bf16",
        "node": "n",
        "gpus": [0],
        "tp": 1,
        "tier": tier,
        "port": port,
        "memory_gib": {"weights": 1, "kv": 1, "overhead": 0.5},
    }
    if kind is not None:
        inst["engine"] = {"kind": kind, "extra_args": list(extra)}
    return Plan(selected="p", points=[{"name": "p", "instances": [inst]}])
