"""A week of agent traffic whose hourly rates have the shape of a real trace.

Source: the Azure LLM inference traces 2023 in tests/data (one production hour each: code
completion and conversation; see tests/data/SOURCES.md), not our workload generator.

Mapping, per model: the code trace feeds the coding roles (coder, reviewer, reasoner), the
conversation trace the others (planner, summarizer, tools), each model its own consecutive
slice of its trace's hour (a third: about 20 minutes, so no two models share requests). The
slice is cut into 168 equal buckets (about 7 s each), and bucket h gives hour h of the week
(hour 0 is Monday 00:00): that hour's request count is the bucket's count times the model's
scale, and its requests are the bucket's own rows, arrival times stretched from the bucket
onto the hour (their order and gaps kept; resampled with a fixed seed when the scale asks
for more or fewer) with their real prompt and output lengths. The scale makes each model's
mean hourly rate that of the lab16 synthetic week (the team size the example cluster is
planned for). So the week keeps the real trace's burstiness and rate swings at the scale of
hours, and its token lengths; it has no diurnal pattern (the traces are one hour long).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
TRACES = {
    "code": ROOT / "tests" / "data" / "AzureLLMInferenceTrace_code.csv",
    "conv": ROOT / "tests" / "data" / "AzureLLMInferenceTrace_conv.csv",
}
ROLES = {  # model -> (trace, slice)
    "coder-32b": ("code", 0),
    "reviewer-14b": ("code", 1),
    "reasoner-30b": ("code", 2),
    "planner-7b": ("conv", 0),
    "summarizer-8b": ("conv", 1),
    "tools-20b": ("conv", 2),
}
HOURS = 7 * 24


def _azure(path: Path) -> pd.DataFrame:
    d = pd.read_csv(path)
    t = pd.to_datetime(d["TIMESTAMP"])
    return pd.DataFrame(
        {
            "t": (t - t.min()).dt.total_seconds().to_numpy(),
            "input_tokens": d["ContextTokens"].to_numpy(),
            "output_tokens": d["GeneratedTokens"].to_numpy(),
        }
    ).sort_values("t", kind="stable")


def real_week(
    hourly_rate: dict[str, float], max_context: dict[str, int], users: int = 10, seed: int = 0
) -> pd.DataFrame:
    """The week as a canonical trace; `hourly_rate`: model -> mean requests per hour."""
    from planner.trace.frame import normalize

    rng = np.random.default_rng(seed)
    src = {k: _azure(p) for k, p in TRACES.items()}
    parts = []
    for model, rate in hourly_rate.items():
        kind, k = ROLES[model]
        d = src[kind]
        span = d["t"].max() / 3.0  # s of the hour one model's slice covers
        rows = d[(d["t"] >= k * span) & (d["t"] < (k + 1) * span)]
        bucket_s = span / HOURS
        b = np.minimum(((rows["t"] - k * span) / bucket_s).astype(int).to_numpy(), HOURS - 1)
        scale = rate / (len(rows) / HOURS)  # requests per hour wanted / per bucket found
        for h in range(HOURS):
            mine = rows[b == h]
            n = int(np.floor(len(mine) * scale + rng.uniform()))  # rounded, mean kept
            if not n:
                continue
            pick = np.sort(rng.choice(len(mine), size=n, replace=n > len(mine)))
            off = (mine["t"].to_numpy()[pick] - k * span - h * bucket_s) / bucket_s  # 0..1
            jitter = rng.uniform(0, 1.0 / max(len(mine), 1), n)  # replicas do not coincide
            ts = h * 3600.0 + np.clip(off + jitter, 0, 0.999999) * 3600.0
            out = np.maximum(mine["output_tokens"].to_numpy()[pick], 1)
            inp = np.clip(mine["input_tokens"].to_numpy()[pick], 1, max_context[model] - out)
            who = rng.integers(0, users, n)
            parts.append(
                pd.DataFrame(
                    {
                        "timestamp": ts,
                        "model": model,
                        "input_tokens": inp,
                        "output_tokens": out,
                        "user": [f"u{u:02d}" for u in who],
                        "session": [f"u{u:02d}-{model}-{h // 24}" for u in who],
                        "cached_tokens": 0,
                    }
                )
            )
    return normalize(pd.concat(parts, ignore_index=True))
