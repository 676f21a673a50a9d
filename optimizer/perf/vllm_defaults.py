"""What vLLM picks when the user passes no flags: its batch limits per GPU and entry point.

Read from vLLM's `EngineArgs.get_batch_defaults` (vllm/engine/arg_utils.py, v0.32): the
token budget of a step (`max_num_batched_tokens`, chunked prefill on by default) and the
batch cap (`max_num_seqs`) depend on the device's total memory, its name (A100s keep the
small budget: larger ones lowered their throughput, vLLM PR #17885) and on how the engine
was started (the OpenAI API server, `vllm serve`, or the offline `LLM` class). The CPU build
scales its own defaults with the number of workers.
"""

from __future__ import annotations

from typing import Literal

from planner.catalog.gpus import GpuSpec

EntryPoint = Literal["serve", "offline"]  # OpenAI API server / `vllm serve` | the LLM class
ENTRY_POINTS: tuple[str, ...] = ("serve", "offline")

_LARGE_GIB = 160.0  # B200/B300-class memory: the largest defaults, GiB
_BIG_GIB = 70.0  # H100/H200-class memory (A100 excepted), GiB


def batch_defaults(gpu: GpuSpec, tp: int = 1, entry: EntryPoint = "serve") -> tuple[int, int]:
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
