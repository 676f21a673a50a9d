"""What every engine offers, and the registry that finds one by the `engine.kind` of a plan.

An engine is pure knowledge about one server program: its command line and environment, the
HTTP routes of readiness, health, sleep and wake, its batch defaults, and how to read its log
when a launch fails. Running the process is engine-agnostic (`planner.engines.process`).
Adding an engine is one module that defines an object of this protocol, plus its line in
`kinds.ENGINE_MODULES` (docs/architecture.md shows the skeleton).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, Protocol

from planner.engines.kinds import ENGINE_MODULES, load_engine

if TYPE_CHECKING:
    from planner.catalog.gpus import GpuSpec
    from planner.schemas.plan import Instance

Device = Literal["cuda", "cpu"]
EntryPoint = Literal["serve", "offline"]  # the OpenAI API server | the engine's offline class
ENTRY_POINTS: tuple[str, ...] = ("serve", "offline")

FailureReason = Literal[
    "out_of_memory",
    "port_in_use",
    "bad_model_path",
    "hub_auth",
    "max_model_len_too_large",
    "disk_full",
    "timeout",
    "unknown",
]


class EngineFeature(Enum):
    """What an engine can do on a device; callers ask instead of assuming vLLM on CUDA."""

    SLEEP_LEVEL_1 = "sleep_level_1"  # sleep keeping the weights in host RAM
    SLEEP_LEVEL_2 = "sleep_level_2"  # sleep dropping the weights
    KV_OFFLOAD = "kv_offload"  # KV cache spilled to host RAM
    EXPERT_OFFLOAD = "expert_offload"  # weights (experts) kept in host RAM
    PREFIX_CACHE = "prefix_cache"  # reuses the KV cache of shared prompt prefixes
    CACHED_TOKEN_USAGE = "cached_token_usage"  # reports cached prompt tokens per request


@dataclass(frozen=True)
class EnginePackage:
    """The Python package an engine's server needs on the host that runs it."""

    module: str  # what must import there (the extras check looks it up without importing it)
    # the pip distributions that bring it, in order; the version profiles record is the first
    # one installed
    distributions: tuple[str, ...]


class Engine(Protocol):
    """One server program; pure (no I/O), so the optimizer may read its defaults."""

    kind: str  # what plans write in `engine.kind`
    display_name: str  # in messages ("vLLM server on ...")
    package: EnginePackage  # what must be installed to run it, and where its version is read
    process_marker: str  # a word of its command line: guards against reused pids
    ready_route: str  # GET answering 200 once the server serves
    health_route: str  # GET answering 200 while the server is healthy
    wake_route: str  # POST waking a sleeping server
    is_sleeping_route: str  # GET answering {"is_sleeping": bool}
    reload_request: (
        tuple[str, dict[str, Any]] | None
    )  # POST (route, body) reloading weights after level 2
    completion_route: str  # POST taking a prompt of token ids (the profiler times it)
    # the API routes the gateway forwards and the relay passes on -> the task serving each
    api_routes: dict[str, str]
    stream_usage_routes: frozenset[str]  # routes whose streams report usage only when asked

    def task_args(self, task: str) -> list[str]:
        """The flags a model's task (`generate`, `embed`) needs (in `engine.extra_args`)."""
        ...

    def task(self, inst: Instance) -> str:
        """The task an instance runs (`generate`, `embed`), from its engine arguments."""
        ...

    def wake_steps(self, level: int) -> list[tuple[str, dict[str, Any] | None]]:
        """The POSTs (route, JSON body or None) that wake a server slept at `level`, in
        order, all before any traffic (after a level 2: wake, then reload the weights). The
        profiler times the same steps."""
        ...

    def control_routes(self) -> frozenset[tuple[str, str]]:
        """(method, path) the planner sends an engine from another host (readiness, health,
        sleep, wake): what a node's relay passes on besides the API routes. Routes that run
        arbitrary code stay out (a node's agent sends those on loopback)."""
        ...

    def completion_body(
        self, served: str, ids: list[int], out_tokens: int, *, stream: bool
    ) -> dict[str, Any]:
        """The JSON body, at `completion_route`, of a greedy completion of exactly `out_tokens`
        tokens for a prompt of token ids (the profiler times it); streamed, every chunk
        carries the running count of completion tokens (`usage.completion_tokens`)."""
        ...

    def check_request(self, task: str, model: str) -> tuple[str, dict[str, Any]]:
        """(route, JSON body) of the one greedy request that checks a started or woken server
        of `task` before traffic goes to it."""
        ...

    def check_answer(self, task: str, data: bytes) -> str | None:
        """A fingerprint of the check's answer (the same on every wake of the same weights),
        or None when the body is no sound answer."""
        ...

    def features(self, device: Device) -> frozenset[EngineFeature]:
        """What this engine can do on `device`."""
        ...

    def build_argv(
        self,
        inst: Instance,
        *,
        model_path: str,
        served_name: str,
        python: str = ...,  # default: the interpreter running planner (sys.executable)
        device: Device = "cuda",
        host: str = "127.0.0.1",
        secret: str = "",
    ) -> tuple[list[str], dict[str, str]]:
        """The server's argv and the environment variables to add; pure. `secret`: the
        instance's API key, passed in the environment, never on argv (docs/security.md)."""
        ...

    def managed_flag(self, extra_args: list[str]) -> tuple[str, str] | None:
        """The first of `extra_args` that sets a flag the planner sets itself, and the plan
        field (or planner part) that owns it; None when there is none."""
        ...

    def asks_remote_code(self, extra_args: list[str]) -> str | None:
        """The one of `extra_args` that lets the checkpoint run its own Python, or None."""
        ...

    def sleep_route(self, level: int) -> str:
        """POST route putting the server to sleep at `level`."""
        ...

    def sleep_level(self, tier: str) -> int:
        """The sleep level of a plan tier (`host`, `disk`)."""
        ...

    def classify_failure(self, log_text: str) -> FailureReason:
        """Why a launch failed, from its log; `unknown` when no known line matches."""
        ...

    def failure_fix(self, reason: str) -> str | None:
        """What to change for a classified failure, or `sleep_refused` (a sleep call answered
        other than 200); None: no advice."""
        ...

    def parse_startup_log(self, log_text: str) -> dict[str, float | None]:
        """Start-up timings (weight_load_s, engine_init_s, ready_s) from a server log."""
        ...

    def kv_capacity_tokens(self, log_text: str, metrics_text: str = "") -> int | None:
        """Tokens the KV cache holds, from the start-up log, else the metrics text."""
        ...

    def batch_defaults(
        self, gpu: GpuSpec, tp: int = 1, entry: EntryPoint = "serve"
    ) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens) the engine picks without flags."""
        ...

    def quantization_flag(self, quantization: str | None) -> str | None:
        """The engine's quantization method for a variant's quantization (None: from the checkpoint)."""
        ...


def api_routes() -> dict[str, str]:
    """The API routes of every registered engine -> the task of the models serving each (the
    gateway forwards these, and the relay passes them on)."""
    out: dict[str, str] = {}
    for kind in ENGINE_MODULES:
        out.update(load_engine(kind).api_routes)
    return out


def stream_usage_routes() -> frozenset[str]:
    """The routes whose streams report usage only when asked, of any registered engine."""
    return frozenset(r for kind in ENGINE_MODULES for r in load_engine(kind).stream_usage_routes)


def get_engine(kind: str) -> Engine:
    """The engine of `kind` (ValueError naming the known kinds if there is none)."""
    if kind not in ENGINE_MODULES:
        raise ValueError(f"unknown engine kind {kind!r}; known: {', '.join(ENGINE_MODULES)}")
    engine: Engine = load_engine(kind)
    return engine
