"""Reading a vLLM server's log: why a launch failed, and its start-up timings."""

from __future__ import annotations

import re
from typing import Literal

FailureReason = Literal[
    "out_of_memory",
    "port_in_use",
    "bad_model_path",
    "max_model_len_too_large",
    "timeout",
    "unknown",
]

# Patterns seen in vLLM 0.32 logs (CPU build, provoked on purpose) and the CUDA build's messages.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("port_in_use", re.compile(r"Address already in use|\[Errno 98\]", re.I)),
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

FAILURE_FIXES = {  # reason -> what to change
    "port_in_use": "another process listens on the port: stop it or change the instance's port",
    "bad_model_path": "check the variant's path in models.yaml (a checkpoint dir with config.json)",
    "max_model_len_too_large": "lower engine.max_model_len (the model or the KV cache cannot hold it)",
    "out_of_memory": "lower gpu_memory_utilization / max_num_seqs, or free the GPU",
}


def classify_failure(log_text: str) -> FailureReason:
    """The cause of a failed launch from its log; `unknown` when no known line matches."""
    for reason, pat in _PATTERNS:
        if pat.search(log_text):
            return reason  # type: ignore[return-value]
    return "unknown"


_TS = re.compile(r"(?:INFO|WARNING|DEBUG|ERROR) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_LOAD_S = re.compile(
    r"(?:Loading weights took|Model loading took [\d.]+ \w+ (?:memory )?and) ([\d.]+) ?s", re.I
)
_MODEL_LOAD_S = re.compile(r"Model loading took .*?([\d.]+) ?(?:s|seconds)\b", re.I)
_INIT_S = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) ?s", re.I
)


def parse_startup_log(log_text: str) -> dict[str, float | None]:
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


def _first_float(pat: re.Pattern[str], text: str) -> float | None:
    m = pat.search(text)
    return float(m.group(1)) if m else None


def _secs(m: re.Match[str]) -> float:
    _mo, day, hh, mm, ss = (int(g) for g in m.groups())
    return day * 86400.0 + hh * 3600.0 + mm * 60.0 + ss
