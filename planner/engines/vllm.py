"""vLLM: its command line, environment, sleep/wake routes, batch defaults and log lines.

Pure (no I/O): `build_argv` turns an Instance of a plan into the command line and the
environment additions of its server (golden-tested); the optimizer reads the batch defaults
and quantization flags; the process runner (`planner.engines.process`) reads the routes and
classifies a failed launch with `classify_failure`.

Flag semantics follow vLLM 0.32 (`vllm/engine/arg_utils.py`): `--cpu-offload-gb` is per GPU,
`--kv-offloading-size` is the total over the TP ranks, both GiB. The CPU build has no GPU
memory to budget and no sleep mode: its KV cache size comes from `VLLM_CPU_KVCACHE_SPACE`
(whole GiB), and the GPU-only flags are left out. On the CPU build the server runs in float32:
its bf16 GEMMs take the AMX path, which dies with SIGILL on VMs whose CPU advertises AMX
without enabling it (seen on the development machines); the CPU path only serves tiny
development models, and `extra_args` (applied last) can ask for `--dtype bfloat16` again.
"""

from __future__ import annotations

import math
import re
import sys
from typing import TYPE_CHECKING, Any

from planner.engines.base import Device, EngineFeature, EnginePackage, EntryPoint, FailureReason

if TYPE_CHECKING:
    from planner.catalog.gpus import GpuSpec
    from planner.schemas.plan import Instance

# The OpenAI-compatible routes the gateway forwards (and the relay passes on), and the task
# of the models that serve each; vLLM 0.32 also serves Anthropic's Messages API
# (vllm/entrypoints/anthropic: /v1/messages, streamed or not, and its count_tokens).
API_ROUTES: dict[str, str] = {
    "/v1/completions": "generate",
    "/v1/chat/completions": "generate",
    "/v1/responses": "generate",
    "/v1/messages": "generate",
    "/v1/messages/count_tokens": "generate",
    "/v1/embeddings": "embed",
}
# Routes whose streams report usage only when asked (`stream_options.include_usage`); the
# Responses and Messages APIs end their streams with usage anyway; embeddings never stream.
STREAM_USAGE_ROUTES = frozenset({"/v1/completions", "/v1/chat/completions"})
# The post-start/wake check's prompt: answered greedily, the same on every wake of the same
# weights (a woken engine whose weights came back wrong answers another).
CHECK_PROMPT = "The capital of France is"

# Plan variants that are a dtype, not a quantization method.
_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
# vLLM's --quantization for each variant precision; None lets vLLM read the checkpoint's config.
_QUANTIZATION = {"fp8": "fp8", "awq": "awq", "gptq": "gptq"}

# Batch defaults, read from vLLM's `EngineArgs.get_batch_defaults` (v0.32): the token budget
# of a step (chunked prefill on by default) and the batch cap depend on the device's total
# memory, its name (A100s keep the small budget: larger ones lowered their throughput, vLLM
# PR #17885) and on the entry point (the API server / `vllm serve`, or the offline `LLM`
# class). The CPU build scales its own defaults with the number of workers.
_LARGE_GIB = 160.0  # B200/B300-class memory: the largest defaults, GiB
_BIG_GIB = 70.0  # H100/H200-class memory (A100 excepted), GiB

# Patterns seen in vLLM 0.32 logs (CPU build, provoked on purpose) and the CUDA build's messages.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("port_in_use", re.compile(r"Address already in use|\[Errno 98\]", re.I)),
    # a full disk while the weights download or the compile cache is written (checked before
    # out_of_memory: its traceback may mention memory too)
    ("disk_full", re.compile(r"No space left on device|\[Errno 28\]|Disk quota exceeded", re.I)),
    (
        "max_model_len_too_large",
        re.compile(
            r"max_model_len.{0,80}(greater than|larger than|exceeds|too large)"
            r"|larger than the maximum number of tokens that can be stored in KV cache"
            r"|User-specified max_model_len",
            re.I | re.S,
        ),
    ),
    (
        "out_of_memory",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|torch\.OutOfMemoryError|No available memory for the cache blocks"
            r"|Insufficient memory|not enough memory|Cannot allocate memory|MemoryError"
            r"|Free memory on device .* is less than desired"
            r"|less than requested memory for kv",
            re.I,
        ),
    ),
    (
        # the hub refused: a gated repo whose licence this token's account has not accepted,
        # or no/invalid HF_TOKEN (a 401 reads as "Repository Not Found" too: checked first)
        "hub_auth",
        re.compile(
            r"GatedRepoError|Cannot access gated repo|trying to access a gated repo"
            r"|is a gated repository|401 Client Error|403 Forbidden"
            r"|Invalid credentials in Authorization header|Invalid user token",
            re.I,
        ),
    ),
    (
        "bad_model_path",
        re.compile(
            r"Repo id must be in the form|Repository Not Found|is not a local folder and is not a valid model"
            r"|Invalid repository ID|does not appear to have a file named config\.json"
            r"|No such file or directory: .*config\.json|Can't load the configuration of"
            r"|HFValidationError|LocalEntryNotFoundError|We couldn't connect to 'https://huggingface\.co'",
            re.I,
        ),
    ),
]

_FAILURE_FIXES = {  # reason -> what to change
    "port_in_use": "another process listens on the port: stop it or change the instance's port",
    "bad_model_path": "check the variant's path in models.yaml (a checkpoint dir with config.json)",
    "hub_auth": "the hub refused the download (gated repo or 401): accept the model's licence on "
    "its hub page, give the engines an HF_TOKEN of that account (docs/operations.md), or "
    "download it beforehand into HF_HOME",
    "max_model_len_too_large": "lower engine.max_model_len (the model or the KV cache cannot hold it)",
    "out_of_memory": "lower gpu_memory_utilization / max_num_seqs, or free the GPU",
    "disk_full": "free space on the disk holding HF_HOME (the weights), the state dir's logs "
    "and the engine's caches (~/.cache), then apply again",
    # a control call refused (not a launch): the sleep routes are dev-mode routes
    "sleep_refused": "is VLLM_SERVER_DEV_MODE=1 set (build_argv sets it for a `host` tier)?",
}

# The KV cache's size: the start-up log's report (last wins), else /metrics' cache config.
_KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU|TPU)[\w +]* KV cache size: ([\d,]+) tokens")
_LABELS = re.compile(r'(\w+)="([^"]*)"')

_TS = re.compile(r"(?:INFO|WARNING|DEBUG|ERROR) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_LOAD_S = re.compile(
    r"(?:Loading weights took|Model loading took [\d.]+ \w+ (?:memory )?and) ([\d.]+) ?s", re.I
)
_MODEL_LOAD_S = re.compile(r"Model loading took .*?([\d.]+) ?(?:s|seconds)\b", re.I)
_INIT_S = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) ?s", re.I
)


# The flags the planner sets itself, and what owns each (a plan field, or the planner):
# `extra_args` may not set them (planner.schemas.plan checks every plan against this list).
MANAGED_FLAGS: dict[str, str] = {
    "--model": "the instance's `variant` (its path in models.yaml)",
    "--served-model-name": "the instance's `model`",
    "--host": "the planner (engines listen on loopback only; docs/security.md)",
    "--port": "the instance's `port`",
    "--uds": "the planner (engines listen on loopback only; docs/security.md)",
    "--api-key": "the planner (a secret per instance, through the environment)",
    "--config": "the plan (a vLLM config file could set any managed flag)",
    "--enable-sleep-mode": "the instance's `tier` (the planner sets sleep mode)",
    "--tensor-parallel-size": "the instance's `tp`",
    "-tp": "the instance's `tp`",
    "--gpu-memory-utilization": "`engine.gpu_memory_utilization`",
    "--max-model-len": "`engine.max_model_len`",
    "--max-num-seqs": "`engine.max_num_seqs`",
    "--max-num-batched-tokens": "`engine.max_num_batched_tokens`",
    "--kv-cache-dtype": "`engine.kv_cache_dtype`",
    "--quantization": "`engine.quantization`",
    "-q": "`engine.quantization`",
    "--enforce-eager": "`engine.enforce_eager`",
    "--cpu-offload-gb": "the instance's `expert_cpu_offload_gib`",
    "--kv-offloading-size": "the instance's `kv_cpu_offload_gib`",
    "--enable-prompt-tokens-details": "the planner (the gateway logs cached tokens)",
    # what would open an engine beyond the gateway: code it imports, browsers, its own TLS
    "--middleware": "the planner (an engine imports no code a plan names; docs/security.md)",
    "--allowed-origins": "the planner (only the gateway calls an engine; docs/security.md)",
    "--allow-credentials": "the planner (only the gateway calls an engine; docs/security.md)",
    "--ssl-keyfile": "the planner (engines serve loopback; docs/security.md)",
    "--ssl-certfile": "the planner (engines serve loopback; docs/security.md)",
}
# Runs the checkpoint's own Python: only where models.yaml says so for that variant.
TRUST_REMOTE_CODE = "--trust-remote-code"


def flag_name(arg: str) -> str | None:
    """The option an argv token names as vLLM parses it (`--max_model_len=8` is
    `--max-model-len`); None for a value."""
    if not arg.startswith("-") or arg == "-" or arg[1:2].isdigit():
        return None
    name = arg.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def managed_flag(extra_args: list[str]) -> tuple[str, str] | None:
    """The first token of `extra_args` that sets a flag the planner manages, and its owner.

    vLLM's parser takes unambiguous prefixes (`--hos` for `--host`), so a long option that
    starts a managed flag counts as that flag."""
    for arg in extra_args:
        name = flag_name(arg)
        if name is None:
            continue
        if name in MANAGED_FLAGS:
            return arg, MANAGED_FLAGS[name]
        if name.startswith("--") and len(name) > 3:
            for flag, owner in MANAGED_FLAGS.items():
                if flag.startswith(name):
                    return arg, owner
    return None


def asks_remote_code(extra_args: list[str]) -> str | None:
    """The token of `extra_args` that turns on `--trust-remote-code` (or a prefix), or None."""
    for arg in extra_args:
        name = flag_name(arg)
        if name is not None and len(name) > 3 and TRUST_REMOTE_CODE.startswith(name):
            return arg
    return None


def _num(x: float) -> str:
    """A flag value without a trailing `.0` for whole numbers (stable golden files)."""
    return str(int(x)) if float(x).is_integer() else repr(round(float(x), 6))


class Vllm:
    """The vLLM OpenAI-compatible server (`python -m vllm.entrypoints.openai.api_server`)."""

    kind = "vllm"
    display_name = "vLLM"
    process_marker = "vllm"
    ready_route = "/v1/models"
    health_route = "/health"
    wake_route = "/wake_up"
    is_sleeping_route = "/is_sleeping"  # these three need VLLM_SERVER_DEV_MODE=1
    # level 2 dropped the weights: waking means reading them again from the checkpoint
    reload_request = ("/collective_rpc", {"method": "reload_weights"})
    completion_route = "/v1/completions"
    # the CPU build is distributed as vllm-cpu
    package = EnginePackage(module="vllm", distributions=("vllm", "vllm-cpu"))
    api_routes = API_ROUTES
    stream_usage_routes = STREAM_USAGE_ROUTES

    def task_args(self, task: str) -> list[str]:
        """vLLM's flags for a model's task (an embedding checkpoint such as e5-mistral or
        gte-Qwen2 names a causal LM architecture: vLLM would generate unless told to pool)."""
        return ["--runner", "pooling"] if task == "embed" else []

    def task(self, inst: Instance) -> str:
        """`embed` for an instance run with `--runner pooling`, else `generate`."""
        args = list(inst.engine.extra_args)
        for k, a in enumerate(args):
            value = a.split("=", 1)[1] if a.startswith("--runner=") else None
            if a == "--runner" and k + 1 < len(args):
                value = args[k + 1]
            if value == "pooling":
                return "embed"
        return "generate"

    def wake_steps(self, level: int) -> list[tuple[str, dict[str, Any] | None]]:
        """`POST /wake_up`; after a level-2 sleep (weights dropped) then `reload_weights`,
        before any traffic: the same sequence the profiler times as `wake_l2_s`."""
        steps: list[tuple[str, dict[str, Any] | None]] = [(self.wake_route, None)]
        if level >= 2:
            steps.append(self.reload_request)
        return steps

    def control_routes(self) -> frozenset[tuple[str, str]]:
        """(method, path) the planner sends from another host: readiness, health, sleep and
        wake. Not `/collective_rpc` (it runs any engine method): a Ray node's agent sends the
        weight reload itself, on loopback."""
        return frozenset(
            {
                ("GET", self.ready_route),
                ("GET", self.health_route),
                ("GET", self.is_sleeping_route),
                ("POST", "/sleep"),
                ("POST", self.wake_route),
            }
        )

    def completion_body(
        self, served: str, ids: list[int], out_tokens: int, *, stream: bool
    ) -> dict[str, Any]:
        """vLLM's greedy completion of exactly `out_tokens` tokens (`ignore_eos`, and
        `min_tokens` when streamed); streamed with running usage in every chunk."""
        body: dict[str, Any] = {
            "model": served,
            "prompt": ids,
            "max_tokens": out_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
        }
        if stream:
            # every chunk carries the running token count (a chunk may hold several tokens)
            options = {"include_usage": True, "continuous_usage_stats": True}
            body.update(min_tokens=out_tokens, stream=True, stream_options=options)
        return body

    def check_request(self, task: str, model: str) -> tuple[str, dict[str, Any]]:
        """The one greedy request that checks a started or woken server before traffic: one
        token of a completion, or the embedding of one input (an embedding engine has no
        /v1/completions)."""
        if task == "embed":
            return "/v1/embeddings", {"model": model, "input": [CHECK_PROMPT]}
        body = {"model": model, "prompt": CHECK_PROMPT, "max_tokens": 1, "temperature": 0}
        return "/v1/completions", body

    def check_answer(self, task: str, data: bytes) -> str | None:
        """What the check's answer says about the weights (the completion's text, or the
        embedding's first values rounded), compared across wakes; None when it is no answer
        of that kind."""
        import json

        try:
            doc = json.loads(data)
            if task == "embed":
                vec = doc["data"][0]["embedding"]
                return " ".join(f"{float(x):.3f}" for x in vec[:8])
            text = doc["choices"][0]["text"]
        except (ValueError, LookupError, TypeError):
            return None
        return text if isinstance(text, str) else None

    def features(self, device: Device) -> frozenset[EngineFeature]:
        """Sleep mode and offloading exist on CUDA only; the CPU build caches prefixes."""
        common = {EngineFeature.PREFIX_CACHE, EngineFeature.CACHED_TOKEN_USAGE}
        if device == "cuda":
            common |= {
                EngineFeature.SLEEP_LEVEL_1,
                EngineFeature.SLEEP_LEVEL_2,
                EngineFeature.KV_OFFLOAD,
                EngineFeature.EXPERT_OFFLOAD,
            }
        return frozenset(common)

    def build_argv(
        self,
        inst: Instance,
        *,
        model_path: str,
        served_name: str,
        python: str = sys.executable,
        device: Device = "cuda",
        host: str = "127.0.0.1",
        secret: str = "",
    ) -> tuple[list[str], dict[str, str]]:
        """The server's argv and the environment variables to add; pure (no I/O).

        `secret`: the instance's API key, handed over in the environment (`VLLM_API_KEY`),
        never on argv (argv is readable by every local user in `ps`). vLLM checks it on
        `/v1/*` only: `/health`, `/metrics` and the dev-mode routes stay open, so `host` is
        loopback (docs/security.md)."""
        e = inst.engine
        argv = [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model_path,
            "--served-model-name",
            served_name,
            "--host",
            host,
            "--port",
            str(inst.port),
            "--tensor-parallel-size",
            str(inst.tp),
            "--max-model-len",
            str(e.max_model_len),
            "--max-num-seqs",
            str(e.max_num_seqs),
            "--kv-cache-dtype",
            e.kv_cache_dtype,
            # the gateway logs usage.prompt_tokens_details.cached_tokens (the trace's cached_tokens)
            "--enable-prompt-tokens-details",
        ]
        q = (e.quantization or "").lower()
        if device == "cpu":
            argv += ["--dtype", "float32"]
        elif q in _DTYPES:
            argv += ["--dtype", _DTYPES[q]]
        if q and q not in _DTYPES and q not in ("auto", "none"):
            argv += ["--quantization", q]
        if e.max_num_batched_tokens is not None:
            argv += ["--max-num-batched-tokens", str(e.max_num_batched_tokens)]
        env: dict[str, str] = {"VLLM_API_KEY": secret} if secret else {}
        if device == "cuda":
            argv += ["--gpu-memory-utilization", _num(e.gpu_memory_utilization)]
            if inst.expert_cpu_offload_gib > 0:
                # the plan gives the instance's total; vLLM takes GiB per GPU
                argv += ["--cpu-offload-gb", _num(inst.expert_cpu_offload_gib / inst.tp)]
            if inst.kv_cpu_offload_gib > 0:
                argv += ["--kv-offloading-size", _num(inst.kv_cpu_offload_gib)]
            # Every tier: a hop between plan points that only moves an instance between tiers
            # becomes a sleep or a wake instead of a restart (reconcile.spec_sha omits the tier).
            argv += ["--enable-sleep-mode"]
            # exposes /sleep, /wake_up, /is_sleeping (and /collective_rpc: unauthenticated,
            # hence loopback only); the CPU build has no sleep mode and gets no dev mode
            env["VLLM_SERVER_DEV_MODE"] = "1"
            if inst.gpus:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in inst.gpus)
        else:
            # whole GiB (vLLM parses an int); at least 1 so the engine has room for one block
            env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(inst.memory_gib.kv - 1e-9)))
        if e.enforce_eager:
            argv += ["--enforce-eager"]
        argv += list(e.extra_args)
        return argv, env

    def managed_flag(self, extra_args: list[str]) -> tuple[str, str] | None:
        """The first of `extra_args` that sets a flag the planner manages, and its owner."""
        return managed_flag(extra_args)

    def asks_remote_code(self, extra_args: list[str]) -> str | None:
        """The one of `extra_args` that lets the checkpoint run its own Python, or None."""
        return asks_remote_code(extra_args)

    def sleep_route(self, level: int) -> str:
        """`POST /sleep?level=N` (1: weights to host RAM; 2: discard them)."""
        return f"/sleep?level={level}"

    def sleep_level(self, tier: str) -> int:
        """The host tier keeps weights in host RAM (level 1), the disk tier drops them (2)."""
        return 1 if tier == "host" else 2

    def classify_failure(self, log_text: str) -> FailureReason:
        """The cause of a failed launch from its log; `unknown` when no known line matches."""
        for reason, pat in _PATTERNS:
            if pat.search(log_text):
                return reason  # type: ignore[return-value]
        return "unknown"

    def failure_fix(self, reason: str) -> str | None:
        """What to change for a classified failure."""
        return _FAILURE_FIXES.get(reason)

    def parse_startup_log(self, log_text: str) -> dict[str, float | None]:
        """Start-up timings from a vLLM server log, seconds (None where the line is missing).

        `weight_load_s`: reading the checkpoint into the device; `engine_init_s`: memory
        profiling, KV cache allocation and warm-up/compilation; `ready_s`: first log line to
        the line announcing the server's routes (includes the Python imports after the first line).
        """
        weight = _first_float(_LOAD_S, log_text)
        if weight is None:  # "took 0.00 seconds" is a reading, not a missing line
            weight = _first_float(_MODEL_LOAD_S, log_text)
        init = _first_float(_INIT_S, log_text)
        ready = None
        stamps = [(m.start(), _secs(m)) for m in _TS.finditer(log_text)]
        if stamps:
            start = stamps[0][1]
            pos = log_text.find("Starting vLLM server")
            if pos < 0:
                pos = log_text.find("Application startup complete")
            if pos >= 0:
                before = [s for p, s in stamps if p <= pos]
                if before:
                    ready = before[-1] - start
        return {"weight_load_s": weight, "engine_init_s": init, "ready_s": ready}

    def kv_capacity_tokens(self, log_text: str, metrics_text: str = "") -> int | None:
        """Tokens the KV cache holds: the start-up log's report (last wins), else `/metrics`
        (`vllm:cache_config_info` num_gpu_blocks x block_size); None when neither says."""
        found = _KV_TOKENS.findall(log_text)
        if found:
            return int(found[-1].replace(",", ""))
        for line in metrics_text.splitlines():
            if line.startswith("vllm:cache_config_info{"):
                labels = dict(_LABELS.findall(line))
                try:
                    return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
                except (KeyError, ValueError):
                    return None
        return None

    def batch_defaults(
        self, gpu: GpuSpec, tp: int = 1, entry: EntryPoint = "serve"
    ) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens) vLLM uses on `tp` GPUs of type `gpu`."""
        serve = entry == "serve"
        if gpu.arch == "cpu":
            world = max(1, tp)  # the CPU build scales with its workers
            return (128 if serve else 256) * world, (2048 if serve else 4096) * world
        if gpu.memory_gib >= _LARGE_GIB:
            return 1024, 16384
        if gpu.memory_gib >= _BIG_GIB and "a100" not in gpu.name.lower():
            return 1024, 8192 if serve else 16384
        return 256, 2048 if serve else 8192

    def quantization_flag(self, quantization: str | None) -> str | None:
        """vLLM's `--quantization` for a variant's precision (None: read the checkpoint)."""
        return _QUANTIZATION.get(quantization or "")


def _first_float(pat: re.Pattern[str], text: str) -> float | None:
    m = pat.search(text)
    return float(m.group(1)) if m else None


def _secs(m: re.Match[str]) -> float:
    _mo, day, hh, mm, ss = (int(g) for g in m.groups())
    return day * 86400.0 + hh * 3600.0 + mm * 60.0 + ss


ENGINE = Vllm()
