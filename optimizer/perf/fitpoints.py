"""The points a calibration fits: measured latencies as sums of unit-efficiency engine steps.

Shared by the engine-point fit (`calibration`) and the closed-loop fit of imported serving
runs (`calib_loop`), so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.catalog.gpus import GpuSpec
from planner.engines.base import get_engine
from planner.engines.kinds import DEFAULT_KIND  # the optimizer plans for the default engine
from planner.optimizer.perf.calib import Calib
from planner.optimizer.perf.latency import build_step_model
from planner.optimizer.perf.types import StepModel
from planner.schemas.profile import EngineRun, Profile


@dataclass(frozen=True)
class StepTerms:
    """One engine step at unit efficiencies and zero overhead: seconds per resource."""

    mem_s: float  # bytes read / peak bandwidth
    lin_s: float  # linear-layer FLOPs / peak GEMM rate
    attn_s: float  # attention FLOPs / peak rate
    comm_s: float  # TP all-reduce time at the base link constants
    floor_s: float = 0.0  # the kernels' minimum time (not fitted here)
    seqs: float = 1.0  # sequences in the step (each costs the fitted per-sequence time)


@dataclass(frozen=True)
class FitPoint:
    """A measured latency and the steps the model says it is made of."""

    kind: str  # prefill (found the engine idle) | busy (a TTFT that found it at work) | decode
    y_s: float  # measured, s
    steps: tuple[StepTerms, ...]
    label: str = ""  # what was measured, for people: "prefill 128 tok", "decode x8 TPOT"


def unit_step_model(run: EngineRun, gpu: GpuSpec, base: Calib) -> StepModel:
    """The run's step model with efficiencies 1 (attention at the default ratio) and no overhead."""
    unit = replace(
        base,
        compute_efficiency=1.0,
        bandwidth_efficiency=1.0,
        attn_efficiency=base.attn_efficiency / base.compute_efficiency,
        step_overhead_s=0.0,
    )
    assert run.arch is not None
    return build_step_model(run.arch, run.quantization or "bf16", gpu, run.tp, unit)


def step_terms(
    sm: StepModel, new_tokens: float, kv_tokens: float, pairs: float, seqs: float = 1.0
) -> StepTerms:
    """Split one step of the unit model (`seqs` sequences) into its memory, linear, attention
    and comm parts."""
    mem = (
        sm.dense_weight_read_s
        + sm.expert_read_s * sm.experts_touched(new_tokens)
        + sm.kv_read_s_per_token * kv_tokens
    )
    comm = sm.comm_latency_s + sm.comm_s_per_token * new_tokens if sm.comm_latency_s else 0.0
    lin, attn = sm.compute_s_per_token * new_tokens, sm.attn_s_per_pair * pairs
    return StepTerms(mem, lin, attn, comm, sm.fixed_s(new_tokens), seqs)


def prefill_steps(sm: StepModel, n: int, chunk: int) -> tuple[StepTerms, ...]:
    """The chunks of an n-token prefill (as `phases.prefill_s` splits it)."""
    out = []
    done = 0
    while done < n:
        c = min(chunk, n - done)
        out.append(step_terms(sm, c, done + c, c * done + c * (c + 1) / 2.0))
        done += c
    return tuple(out)


def is_imported(run: EngineRun) -> bool:
    """A run `planner profile import` added: a serving benchmark (calib_loop fits those)."""
    return bool(run.notes) and run.notes[0].startswith("imported:")


def fit_points(profile: Profile, gpu: GpuSpec, base: Calib) -> list[FitPoint]:
    """Every usable prefill and decode point of the profile's successful, profiled runs."""
    pts: list[FitPoint] = []
    for run in profile.engine:
        if run.status != "ok" or run.arch is None or is_imported(run):
            continue
        sm = unit_step_model(run, gpu, base)
        chunk = run.chunk_tokens or get_engine(DEFAULT_KIND).batch_defaults(gpu, run.tp)[1]
        for p in run.prefill:
            steps = prefill_steps(sm, p.prompt_tokens, chunk)
            label = f"prefill {p.prompt_tokens} tok"
            pts.append(FitPoint("prefill", p.latency_s.median, steps, label))
        contexts = len({d.prompt_tokens for d in run.decode})
        for d in run.decode:
            kv = d.concurrency * (d.prompt_tokens + d.output_tokens / 2.0)
            step = step_terms(sm, d.concurrency, kv, kv, d.concurrency)
            label = f"decode x{d.concurrency} TPOT" + (
                f" ({d.prompt_tokens} tok)" if contexts > 1 else ""
            )
            pts.append(FitPoint("decode", d.tpot_s.median, (step,), label))
            if d.concurrency == 1 and d.ttft_s is not None:  # one client: TTFT is its prefill
                # sent as the last stream ended: on the CPU build it finds the engine awake
                # (Calib.busy_prefill_overhead_s); elsewhere it is fitted with the prefills
                kind = "busy" if gpu.arch == "cpu" else "prefill"
                steps = prefill_steps(sm, d.prompt_tokens, chunk)
                pts.append(FitPoint(kind, d.ttft_s.median, steps, "decode x1 TTFT"))
    return [p for p in pts if p.y_s > 0]


def predict(
    points: list[FitPoint],
    ce: float,
    be: float,
    o: float,
    po: float,
    so: float = 0.0,
    pb: float | None = None,
    ar: float = 1.0,
) -> np.ndarray:
    """Model latency of each point (`so`: s per sequence per step; `pb`: the request
    overhead of a `busy` point, None: `po`; `ar`: the all-reduces' time scaled, as
    `calib.with_allreduce_scale`), s."""
    over = {"prefill": po, "busy": po if pb is None else pb}
    out = []
    for p in points:
        t = sum(
            o
            + so * s.seqs
            + s.floor_s
            + max(s.mem_s / be, (s.lin_s + s.attn_s) / ce)
            + s.comm_s * ar
            for s in p.steps
        )
        out.append(t + over.get(p.kind, 0.0))
    return np.array(out)
