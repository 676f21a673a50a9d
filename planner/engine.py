"""Starting, watching and stopping one vLLM OpenAI server.

`build_argv` is pure: an Instance of a plan becomes the command line and the environment
additions of its server (golden-tested). The rest is a thin runner: spawn in its own process
group with output to a log file, poll `/v1/models` until ready, classify a failed launch from
the log (`engine_log`), stop the whole group.

Flag semantics follow vLLM 0.32 (`vllm/engine/arg_utils.py`): `--cpu-offload-gb` is per GPU,
`--kv-offloading-size` is the total over the TP ranks, both GiB. The CPU build has no GPU
memory to budget and no sleep mode: its KV cache size comes from `VLLM_CPU_KVCACHE_SPACE`
(whole GiB), and the GPU-only flags are left out. On the CPU build the server runs in float32:
its bf16 GEMMs take the AMX path, which dies with SIGILL on VMs whose CPU advertises AMX
without enabling it (seen on the development machines); the CPU path only serves tiny
development models, and `extra_args` (applied last) can ask for `--dtype bfloat16` again.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Literal

from planner.engine_log import FAILURE_FIXES, classify_failure
from planner.errors import LaunchError
from planner.private import open_private_append
from planner.schemas.plan import Instance

Device = Literal["cuda", "cpu"]

# Plan variants that are a dtype, not a quantization method.
_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


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


def build_argv(
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

    `secret`: the instance's API key, handed over in the environment (`VLLM_API_KEY`), never
    on argv (argv is readable by every local user in `ps`). vLLM checks it on `/v1/*` only:
    `/health`, `/metrics` and the dev-mode routes stay open, so `host` is loopback
    (docs/security.md)."""
    e = inst.engine
    argv = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model_path,
        "--served-model-name", served_name,
        "--host", host,
        "--port", str(inst.port),
        "--tensor-parallel-size", str(inst.tp),
        "--max-model-len", str(e.max_model_len),
        "--max-num-seqs", str(e.max_num_seqs),
        "--kv-cache-dtype", e.kv_cache_dtype,
        # the gateway logs usage.prompt_tokens_details.cached_tokens (the trace's cached_tokens)
        "--enable-prompt-tokens-details",
    ]  # fmt: skip
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
        # exposes /sleep, /wake_up, /is_sleeping (and /collective_rpc: unauthenticated, hence
        # loopback only); the CPU build has no sleep mode and gets no dev mode
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


# ---------------------------------------------------------------- runner


def new_secret() -> str:
    """A fresh random API key for one instance (256 bits)."""
    import secrets

    return secrets.token_urlsafe(32)


def auth_headers(secret: str) -> dict[str, str]:
    """The header that passes vLLM's API-key check (none without a secret)."""
    return {"Authorization": f"Bearer {secret}"} if secret else {}


def is_port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP listener could bind `host:port` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def start_server(argv: list[str], env: dict[str, str], log_path: str | Path) -> subprocess.Popen:
    """Spawn the server in its own process group (so stop reaches the engine children)."""
    full_env = {**os.environ, **env}
    if "CUDA_VISIBLE_DEVICES" not in env:
        full_env.pop("CUDA_VISIBLE_DEVICES", None)
    with open_private_append(log_path) as f:  # engine logs name users' models: 0600
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs on this host (a zombie counts as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def pid_is_server(pid: int, port: int) -> bool:
    """Whether `pid` is a live vLLM server on `port` (guards against reused pids)."""
    if not pid_alive(pid):
        return False
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: trust the pid
    text = [a.decode(errors="replace") for a in args]
    return any("vllm" in a for a in text) and str(port) in text


def http_ok(host: str, port: int, path: str, timeout_s: float = 2.0, *, secret: str = "") -> bool:
    """Whether GET http://host:port/path answers 200 (with the instance's `secret`)."""
    req = urllib.request.Request(f"http://{host}:{port}{path}", headers=auth_headers(secret))
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def http_post(
    host: str, port: int, path: str, timeout_s: float = 600.0, *, secret: str = ""
) -> int:
    """POST with an empty body; returns the status (raises on connection failure)."""
    url = f"http://{host}:{port}{path}"
    req = urllib.request.Request(url, data=b"", method="POST", headers=auth_headers(secret))
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def read_tail(log_path: str | Path, max_bytes: int = 64_000) -> str:
    """The end of a log file ('' if absent)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def wait_ready(
    host: str,
    port: int,
    proc: subprocess.Popen | int | None,
    log_path: str | Path,
    timeout_s: float,
    *,
    poll_s: float = 0.5,
    secret: str = "",
) -> float:
    """Block until `/v1/models` answers; returns the seconds waited.

    Raises LaunchError with the classified reason when the process exits first, or
    reason `timeout` when `timeout_s` passes (the process is left to the caller to stop).
    """
    t0 = time.monotonic()
    while True:
        if http_ok(host, port, "/v1/models", timeout_s=2.0, secret=secret):
            return time.monotonic() - t0
        if not _running(proc):
            tail = read_tail(log_path)
            reason = classify_failure(tail)
            raise LaunchError(
                f"vLLM server on {host}:{port} exited during start-up ({reason}); log: {log_path}",
                reason=reason,
                log_tail=_last_lines(tail, 30),
                fix=FAILURE_FIXES.get(reason),
            )
        if time.monotonic() - t0 > timeout_s:
            tail = read_tail(log_path)
            raise LaunchError(
                f"vLLM server on {host}:{port} not ready after {timeout_s:.0f} s; log: {log_path}",
                reason="timeout",
                log_tail=_last_lines(tail, 30),
                fix="raise --timeout, or read the log for a hang",
            )
        time.sleep(poll_s)


def _running(proc: subprocess.Popen | int | None) -> bool:
    if proc is None:
        return True
    if isinstance(proc, int):
        return pid_alive(proc)
    return proc.poll() is None


def _last_lines(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


def stop_server(proc_or_pid: subprocess.Popen | int, timeout_s: float = 30.0) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left after `timeout_s`."""
    pid = proc_or_pid if isinstance(proc_or_pid, int) else proc_or_pid.pid
    proc = None if isinstance(proc_or_pid, int) else proc_or_pid
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not pid_alive(pid) and not _group_alive(pid):
            break
        time.sleep(0.1)
    else:
        _signal_group(pid, signal.SIGKILL)
        end = time.monotonic() + 5.0
        while time.monotonic() < end and (pid_alive(pid) or _group_alive(pid)):
            if proc is not None:
                proc.poll()
            time.sleep(0.05)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)


def _signal_group(pid: int, sig: int) -> None:
    """Signal the group led by `pid` (servers start their own session); else the pid alone."""
    try:
        os.killpg(pid, sig)
        return
    except ProcessLookupError:
        pass  # the leader's group is empty
    except PermissionError:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
