"""Start-up cost of the CLI: `planner --help` in a fresh interpreter (best of 5), which heavy
modules importing planner.cli.main pulls in (must be none of torch, vllm, ray, numba), and
how long `planner estimate --batch` takes for 1,000 scenario rows (in-process, after
start-up: the estimate service `planner.app.estimate` and its JSON, as the command runs them)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = (
    "torch",
    "vllm",
    "ray",
    "numba",
    "transformers",
    "httpx",
    "fastapi",
    "uvicorn",
    "matplotlib",
)


def estimate_batch_s(rows: int = 1000) -> float:
    """Wall time of `planner estimate --batch` on `rows` random scenarios (seeded), s."""
    # the modules `planner` loads at start-up (timed above, in help_best_s), loaded as the
    # command's run finds them: what follows is the command's own time
    import planner.schemas  # noqa: F401
    from planner.app.estimate import EngineSettings, estimate

    rng = random.Random(0)
    models = [
        "Qwen3-8B",
        "Qwen3-32B",
        "Llama-3.1-8B-Instruct",
        "gpt-oss-20b",
        "Qwen3-30B-A3B",
        "gemma-3-27b-it",
    ]
    gpus = ["L40S", "H100-SXM", "RTX-4090", "A100-80GB-PCIe"]
    lines = ["model,gpu,tp,quantization,kv_cache_dtype,input_len,output_len,concurrency"]
    for _ in range(rows):
        lines.append(
            f"{rng.choice(models)},{rng.choice(gpus)},{rng.choice([1, 2, 4])},"
            f"{rng.choice(['bf16', 'fp8', 'awq'])},auto,{rng.randint(100, 8000)},"
            f"{rng.randint(10, 1000)},{rng.randint(1, 64)}"
        )
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "scenarios.csv"
        p.write_text("\n".join(lines) + "\n")
        t = time.perf_counter()
        json.dumps([r.to_json() for r in estimate(p, EngineSettings())], indent=2)
        return time.perf_counter() - t


def main() -> int:
    times = []
    for _ in range(5):
        t = time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-m", "planner.cli.main", "--help"], capture_output=True, text=True
        )
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            print(r.stderr)
            return 1
    probe = (
        f"import sys, planner.cli.main\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = [m for m in r.stdout.strip().split(",") if m]
    print(
        f"planner --help: best {min(times):.3f} s, median {sorted(times)[2]:.3f} s over 5 fresh runs"
    )
    print(f"heavy modules imported by planner.cli.main: {loaded or 'none'}")
    bad = [m for m in loaded if m in ("torch", "vllm", "ray", "numba")]
    batch_s = estimate_batch_s()
    print(f"planner estimate --batch, 1000 rows: {batch_s:.3f} s (in-process)")
    print(
        f"RESULT help_best_s={min(times):.3f} heavy_imports={len(loaded)} torch={int('torch' in loaded)} "
        f"vllm={int('vllm' in loaded)} ray={int('ray' in loaded)} numba={int('numba' in loaded)} "
        f"estimate_1000_rows_s={batch_s:.3f} pass={int(not bad and batch_s < 1.0)}"
    )
    return 0 if not bad and batch_s < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
