"""A second engine kind for the tests (issue 42 item 2): other flags, routes and wake calls
than vLLM's. Registering it is this module plus one line in `kinds.ENGINE_MODULES` (the
tests add that line with monkeypatch): nothing else in the planner names an engine."""

from __future__ import annotations

import json
import sys
from typing import ClassVar

from planner.engines.base import EngineFeature, EnginePackage


class StubEngine:
    kind = "stub"
    display_name = "Stub"
    process_marker = "stub_server"
    ready_route = "/ready"
    health_route = "/alive"
    wake_route = "/resume"
    is_sleeping_route = "/paused"
    reload_request = ("/load", {"from": "disk"})
    completion_route = "/v1/complete"
    package = EnginePackage(module="stub_server", distributions=("stub-server",))
    api_routes: ClassVar[dict[str, str]] = {
        "/v1/chat/completions": "generate",
        "/v1/embed": "embed",
    }
    stream_usage_routes: frozenset[str] = frozenset()

    def features(self, device):
        return frozenset({EngineFeature.SLEEP_LEVEL_1, EngineFeature.SLEEP_LEVEL_2})

    def build_argv(
        self,
        inst,
        *,
        model_path,
        served_name,
        python=sys.executable,
        device="cuda",
        host="127.0.0.1",
        secret="",
    ):
        argv = [
            python,
            "-m",
            "stub_server",
            "--weights",
            model_path,
            "--listen-port",
            str(inst.port),
            *inst.engine.extra_args,
        ]
        return argv, {"STUB_KEY": secret}

    def managed_flag(self, extra_args):
        hit = next((a for a in extra_args if a in ("--listen-port", "--weights")), None)
        return (hit, "the planner") if hit else None

    def asks_remote_code(self, extra_args):
        return None

    def sleep_route(self, level):
        return f"/pause?depth={level}"

    def sleep_level(self, tier):
        return 1 if tier == "host" else 2

    def task_args(self, task):
        return ["--pool"] if task == "embed" else []

    def task(self, inst):
        return "embed" if "--pool" in inst.engine.extra_args else "generate"

    def wake_steps(self, level):
        return [(self.wake_route, None)] + ([self.reload_request] if level >= 2 else [])

    def control_routes(self):
        return frozenset(
            {("GET", "/ready"), ("GET", "/alive"), ("POST", "/pause"), ("POST", "/resume")}
        )

    def completion_body(self, served, ids, out_tokens, *, stream):
        return {"model": served, "tokens": ids, "length": out_tokens, "stream": stream}

    def check_request(self, task, model):
        if task == "embed":
            return "/v1/embed", {"model": model, "texts": ["check"]}
        return "/v1/chat/completions", {
            "model": model,
            "max_tokens": 1,
            "messages": [{"role": "user", "content": "check"}],
        }

    def check_answer(self, task, data):
        try:
            return json.dumps(json.loads(data)["answer"])
        except (ValueError, LookupError, TypeError):
            return None

    def classify_failure(self, log_text):
        return "unknown"

    def failure_fix(self, reason):
        return None

    def parse_startup_log(self, log_text):
        return {"weight_load_s": None, "engine_init_s": None, "ready_s": None}

    def kv_capacity_tokens(self, log_text, metrics_text=""):
        return None

    def batch_defaults(self, gpu, tp=1, entry="serve"):
        return 8, 512

    def quantization_flag(self, quantization):
        return None


ENGINE = StubEngine()
