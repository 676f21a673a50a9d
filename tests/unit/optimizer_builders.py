"""Builders of the optimizer's inputs for tests: step models and instance perf with only the
terms a test sets, points, columnar traces, an SLO, and per-model demand."""

from __future__ import annotations

import numpy as np

from planner.optimizer.demand import ModelDemand
from planner.optimizer.perf.types import InstancePerf, StepModel
from planner.schemas.plan import Instance, MemoryGib, Point
from planner.schemas.slo import Slo, Targets

# a step that costs nothing: each test sets only the terms it exercises
_NO_STEP_COST = dict(
    overhead_s=0.0,
    dense_weight_read_s=0.0,
    expert_read_s=0.0,
    num_experts=0,
    experts_per_tok=0,
    kv_read_s_per_token=0.0,
    compute_s_per_token=0.0,
    attn_s_per_pair=0.0,
    comm_s_per_token=0.0,
    comm_latency_s=0.0,
)


def step_model(**kw) -> StepModel:
    return StepModel(**(_NO_STEP_COST | kw))


def perf(step: StepModel, **kw) -> InstancePerf:
    base = dict(
        weights_gib_per_gpu=10.0,
        kv_gib_per_gpu=5.0,
        overhead_gib_per_gpu=1.0,
        context_gib_per_gpu=0.5,
        kv_bytes_per_token=1e5,
        max_kv_tokens=1_000_000,
        max_num_seqs=64,
        chunk_tokens=2048,
        step=step,
        cold_start_s=30.0,
        wake_host_s=2.0,
        wake_disk_s=9.0,
        sleep_s=0.5,
        weights_host_gib=10.0,
    )
    return InstancePerf(**(base | kw))


def point(
    tiers: list[str], models: list[str] | None = None, gpus: list[list[int]] | None = None
) -> Point:
    models = models or [f"m{k}" for k in range(len(tiers))]
    gpus = gpus or [[0]] * len(tiers)
    return Point(
        name="p",
        instances=[
            Instance(
                id=f"i{k}",
                model=models[k],
                variant="bf16",
                node="n",
                gpus=gpus[k],
                tp=len(gpus[k]),
                tier=t,
                memory_gib=MemoryGib(weights=10, kv=5, overhead=1),
                port=8000 + k,
            )
            for k, t in enumerate(tiers)
        ],
    )


def trace(t, model, inp, out, session=None, cached=None) -> dict:
    n = len(t)
    return {
        "timestamp": np.asarray(t, float),
        "model": np.asarray(model if not isinstance(model, str) else [model] * n, dtype=object),
        "input_tokens": np.asarray(inp if np.ndim(inp) else [inp] * n),
        "output_tokens": np.asarray(out if np.ndim(out) else [out] * n),
        "session": None if session is None else np.asarray(session, dtype=object),
        "cached_tokens": None if cached is None else np.asarray(cached),
    }


SLO = Slo(default=Targets(ttft_p95_s=2.0, tpot_p95_s=0.05, switch_p95_s=5.0))


def model_demand(names, rates):
    return {
        n: ModelDemand(
            requests=100,
            peak_rps=r,
            mean_input_tokens=2000,
            mean_output_tokens=200,
            mean_cached_tokens=500,
            switch_ins=10 + 7 * i,
            switch_ins_per_hour=2.0 + 3 * i,
            share=1 / len(names),
        )
        for i, (n, r) in enumerate(zip(names, rates, strict=True))
    }
