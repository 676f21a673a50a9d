"""Per-model demand the MILP needs from a trace: peak rates, mean lengths, switch-ins."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

IDLE_GAP_S = 60.0  # a request after this long without one for the same model counts as a switch-in


@dataclass(frozen=True)
class ModelDemand:
    """What one model is asked for over the trace."""

    requests: int  # requests in the trace
    peak_rps: float  # requests/s in the busiest hour
    mean_input_tokens: float  # prompt length, tokens
    mean_output_tokens: float  # completion length, tokens
    mean_cached_tokens: float  # prefix already computed, tokens
    switch_ins: int  # requests arriving after the model was idle > IDLE_GAP_S
    switch_ins_per_hour: float  # switch_ins over the trace's span, 1/h
    share: float  # share of all requests


def model_demand(
    trace: pd.DataFrame, idle_gap_s: float = IDLE_GAP_S, span_h: float | None = None
) -> dict[str, ModelDemand]:
    """Demand per model name in the trace (empty models are absent); rates per hour over
    `span_h` hours, by default the trace's span (less for a trace with days taken out)."""
    if trace.empty:
        return {}
    ts = trace["timestamp"].to_numpy(dtype=float)
    if span_h is None:
        span_h = (ts.max() - ts.min()) / 3600.0
    span_h = max(span_h, 1.0 / 60.0)
    total = len(trace)
    out: dict[str, ModelDemand] = {}
    for name, g in trace.groupby("model", sort=True):
        t = g["timestamp"].to_numpy(dtype=float)
        hours = np.floor(t / 3600.0).astype(np.int64)
        _, counts = np.unique(hours, return_counts=True)
        gaps = np.diff(t, prepend=-np.inf)
        switch_ins = int((gaps > idle_gap_s).sum())
        out[str(name)] = ModelDemand(
            requests=len(g),
            peak_rps=float(counts.max()) / 3600.0,
            mean_input_tokens=float(g["input_tokens"].mean()),
            mean_output_tokens=float(g["output_tokens"].mean()),
            mean_cached_tokens=float(g["cached_tokens"].mean()) if "cached_tokens" in g else 0.0,
            switch_ins=switch_ins,
            switch_ins_per_hour=switch_ins / span_h,
            share=len(g) / total,
        )
    return out
