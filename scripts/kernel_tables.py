"""Convert aiconfigurator's measured vLLM 0.14 GEMM tables into the JSON the perf model ships.

Source: github.com/ai-dynamo/aiconfigurator, aic-core/src/aiconfigurator_core/systems/data/
{a100_sxm,h100_sxm,h200_sxm,l40s}/gemm/vllm/0.14.0/gemm_perf.parquet (Apache-2.0), copied
unmodified to /work/shared/data/aiconfigurator/data/. Kept: every (m, n, k) of the grid the
four GPUs share (H200's extra m values between them dropped to keep the file small), latency
in microseconds to 4 significant digits; null where a shape was not measured. Developer
tool only: nothing in the package reads the parquet files.

    python scripts/kernel_tables.py SRC_DIR planner/catalog/kernels.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

GPUS = {"a100_sxm": "A100-80GB-SXM", "h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM", "l40s": "L40S"}
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block"}
M_KEEP = {
    1,
    2,
    4,
    8,
    16,
    32,
    48,
    64,
    80,
    96,
    112,
    128,
    160,
    192,
    256,
    384,
    512,
    768,
    1024,
    2048,
    4096,
    8192,
    16384,
    32768,
}


def table(d: pd.DataFrame) -> dict:
    d = d[d.m.isin(M_KEEP)]
    ms, ns, ks = (sorted(int(x) for x in d[c].unique()) for c in ("m", "n", "k"))
    lat = d.groupby(["m", "n", "k"]).latency.median()  # ms
    us = [
        [
            [
                None if (m, n, k) not in lat.index else float(f"{lat[(m, n, k)] * 1e3:.4g}")
                for k in ks
            ]
            for n in ns
        ]
        for m in ms
    ]
    return {"m": ms, "n": ns, "k": ks, "us": us}


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    doc = {
        "source": "ai-dynamo/aiconfigurator, systems/data/<gpu>/gemm/vllm/0.14.0/gemm_perf.parquet"
        " (measured vLLM 0.14 GEMM latencies), Apache-2.0; converted by scripts/kernel_tables.py",
        "units": "us[m][n][k]: one GEMM of m tokens x k in by k x n out, microseconds",
        "gpus": {},
    }
    for folder, name in GPUS.items():
        d = pd.read_parquet(src / folder / "gemm/vllm/0.14.0/gemm_perf.parquet")
        doc["gpus"][name] = {DTYPES[t]: table(g) for t, g in d.groupby("gemm_dtype") if t in DTYPES}
    out.write_text(json.dumps(doc, separators=(",", ":")))


if __name__ == "__main__":
    main()
