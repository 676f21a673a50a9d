"""Candidate instances: every (model, variant, GPU type, TP, KV level) that fits, and GPU sets.

A candidate is a way to run one model; a GPU set is where a TP group may sit (aligned,
consecutive devices of one type on one node). The MILP picks (candidate, set, tier) triples.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from planner.catalog.gpus import GpuSpec
from planner.optimizer.demand import ModelDemand
from planner.optimizer.perf import Calib, instance_perf
from planner.optimizer.perf.types import InstancePerf
from planner.schemas import tp_divides
from planner.schemas.cluster import Cluster, GpuGroup
from planner.schemas.models import ModelEntry, Models, Variant
from planner.schemas.slo import Slo
from planner.units import GIB

TP_DEGREES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class GpuSet:
    """A group of `len(gpus)` devices of one type on one node that can host one TP group."""

    node: str
    gpus: tuple[int, ...]
    gpu_type: str
    memory_gib: float  # each device's memory, GiB
    interconnect: str
    group: GpuGroup  # the cluster group the devices belong to


@dataclass(frozen=True)
class Candidate:
    """One way to run a model: variant, GPU type, TP degree, KV budget, and its perf numbers."""

    model: str
    variant: str
    quantization: str
    gpu_type: str
    tp: int
    kv_level: int  # index into the KV levels tried
    max_model_len: int
    max_num_seqs: int
    perf: InstancePerf
    capacity_rps: float  # requests/s it sustains at the TPOT target, for this model's lengths
    quality_penalty: float

    @property
    def key(self) -> str:
        """Stable identifier, used for deterministic ordering."""
        return f"{self.model}|{self.variant}|{self.gpu_type}|tp{self.tp}|kv{self.kv_level}"


@dataclass(frozen=True)
class Knobs:
    """What the outer search sets and the MILP takes as given."""

    headroom: float = 1.2  # capacity / peak-hour demand
    kv_factor: float = 1.0  # KV budget vs max_num_seqs x mean sequence length
    max_num_seqs: int = 32  # batch cap of every instance
    w_switch: float = 1.0  # objective weight of expected switch delay, per s/h
    w_memory: float = 1.0  # objective weight of warm GPU memory, per GiB
    w_quality: float = 10.0  # objective weight of the variant's quality penalty
    w_gpus: float = 0.5  # objective weight of GPUs used
    may_sleep: frozenset[str] = frozenset()  # models allowed a host/disk tier


def gpu_sets(cluster: Cluster, max_tp: int) -> list[GpuSet]:
    """Aligned TP groups of 1, 2, 4 ... devices inside each GPU group of each node."""
    out: list[GpuSet] = []
    for node in cluster.nodes:
        ids = node.device_ids()
        k = 0
        for group in node.gpus:
            gids = ids[k : k + group.count]
            k += group.count
            spec = group.spec
            for tp in TP_DEGREES:
                if tp > max_tp or tp > len(gids):
                    break
                for start in range(0, len(gids) - tp + 1, tp):
                    out.append(
                        GpuSet(
                            node.name,
                            tuple(gids[start : start + tp]),
                            spec.name,
                            spec.memory_gib,
                            group.interconnect,
                            group,
                        )
                    )
    return out


def gpu_groups(cluster: Cluster) -> tuple[tuple[tuple[str, int], ...], ...]:
    """(node, device) keys of each GPU group, in device order (for symmetry breaking)."""
    out = []
    for node in cluster.nodes:
        ids = node.device_ids()
        k = 0
        for group in node.gpus:
            out.append(tuple((node.name, d) for d in ids[k : k + group.count]))
            k += group.count
    return tuple(out)


def gpu_specs(cluster: Cluster) -> dict[str, GpuSpec]:
    """Every GPU type in the cluster by name (inline specs included)."""
    return {g.spec.name: g.spec for n in cluster.nodes for g in n.gpus}


def capacity_rps(
    perf: InstancePerf, demand: ModelDemand | None, tpot_target_s: float | None
) -> float:
    """Requests/s an instance sustains with TPOT under target and the batch's KV resident."""
    in_tok = demand.mean_input_tokens if demand else 1024.0
    out_tok = max(demand.mean_output_tokens if demand else 256.0, 1.0)
    new_tok = max(in_tok - (demand.mean_cached_tokens if demand else 0.0), 1.0)
    seq_tok = in_tok + out_tok  # tokens a finished sequence holds in KV
    best = 0.0
    b = 1
    while b <= perf.max_num_seqs:
        if b * seq_tok > perf.max_kv_tokens and b > 1:
            break
        ctx = b * (in_tok + out_tok / 2)  # mean KV tokens in the batch mid-decode
        tpot_s = perf.step.time_s(b, ctx, ctx, b)  # one decode step for b sequences, s
        if tpot_target_s is not None and tpot_s > tpot_target_s and b > 1:
            break
        prefill_s = perf.step.time_s(new_tok, in_tok, new_tok * (in_tok - new_tok / 2))  # s
        # each request costs its prefill plus its share of the batch's decode steps
        per_req_s = prefill_s + out_tok * tpot_s / b
        best = max(best, 1.0 / per_req_s)
        b *= 2
    return best


def enumerate_candidates(
    cluster: Cluster,
    models: Models,
    slo: Slo,
    demand: dict[str, ModelDemand],
    knobs: Knobs,
    *,
    max_tp: int,
    max_model_len_cap: int | None,
    gpu_margin: float,
    calib: dict[str, Calib] | None = None,
) -> list[Candidate]:
    """All candidates whose awake memory fits one device of their type, deterministic order."""
    specs = gpu_specs(cluster)
    counts: dict[str, int] = {}
    for n in cluster.nodes:
        for g in n.gpus:
            counts[g.spec.name] = max(counts.get(g.spec.name, 0), g.count)
    out: list[Candidate] = []
    for m in models.models:
        arch = m.arch
        d = demand.get(m.name)
        mml = min(m.max_context, max_model_len_cap or m.max_context, arch.max_position_embeddings)
        seq_tok = (d.mean_input_tokens + d.mean_output_tokens) if d else mml / 4
        tpot = slo.for_model(m.name).tpot_p95_s
        for v, gname, tp in _layouts(m, specs, counts, max_tp):
            levels = _kv_levels(
                arch, v.quantization, specs[gname], tp, mml, knobs, seq_tok, gpu_margin, calib
            )
            for level, perf in levels:
                out.append(
                    Candidate(
                        model=m.name,
                        variant=v.name,
                        quantization=v.quantization,
                        gpu_type=gname,
                        tp=tp,
                        kv_level=level,
                        max_model_len=mml,
                        max_num_seqs=knobs.max_num_seqs,
                        perf=perf,
                        capacity_rps=capacity_rps(perf, d, tpot),
                        quality_penalty=v.quality_penalty,
                    )
                )
    return out


def _layouts(
    m: ModelEntry, specs: dict[str, GpuSpec], counts: dict[str, int], max_tp: int
) -> Iterator[tuple[Variant, str, int]]:
    """(variant, GPU type, TP degree) of model `m` in order, where the TP degree fits the
    node's GPUs of that type and divides the attention heads."""
    arch = m.arch
    for v in m.variants:
        for gname in sorted(specs):
            for tp in TP_DEGREES:
                if tp > max_tp or tp > counts[gname]:
                    break
                if tp_divides(arch.num_attention_heads, arch.num_kv_heads, tp):
                    yield v, gname, tp


def _kv_levels(
    arch, quant, spec, tp, mml, knobs: Knobs, seq_tok, gpu_margin: float, calib
) -> list[tuple[int, InstancePerf]]:
    """(KV level, perf) of one layout at each KV budget that fits: none where the GPU has no
    KV room for one max_model_len sequence (vLLM refuses to start)."""
    # weights, overhead and KV bytes/token do not depend on the KV budget
    probe = _perf(arch, quant, spec, tp, mml, knobs.max_num_seqs, 0.0, calib)
    free_gib = (
        spec.memory_gib * (1 - gpu_margin) - probe.weights_gib_per_gpu - probe.overhead_gib_per_gpu
    )
    kv_per_tok_gib = probe.kv_bytes_per_token / tp / GIB  # per GPU, GiB/token
    fit_tokens = free_gib / kv_per_tok_gib if kv_per_tok_gib > 0 else math.inf
    if fit_tokens < mml:
        return []
    out = []
    seen: set[int] = set()
    for level, frac in enumerate((0.5, 1.0)):
        # KV tokens: a share of max_num_seqs working sets, at least one full sequence, at most
        # what the GPU has left
        want = knobs.kv_factor * frac * knobs.max_num_seqs * seq_tok
        kv_tokens = int(min(fit_tokens, max(mml, want)))
        if kv_tokens in seen:
            continue
        seen.add(kv_tokens)
        perf = _perf(
            arch, quant, spec, tp, mml, knobs.max_num_seqs, kv_tokens * kv_per_tok_gib, calib
        )
        if perf.fits:  # the same rule as `invariants` and the baselines
            out.append((level, perf))
    return out


def _perf(arch, quant, spec, tp, mml, seqs, kv_gib, calib) -> InstancePerf:
    return instance_perf(
        arch,
        quant,
        spec,
        tp,
        max_model_len=mml,
        max_num_seqs=seqs,
        kv_gib=kv_gib if kv_gib > 0 else None,
        calib=(calib or {}).get(spec.name),
    )


def smallest_footprint(cluster: Cluster, models: Models, model: str, calib=None) -> list[str]:
    """For an unplaceable model: its smallest per-GPU footprint on each node at the largest TP."""
    m = models.model(model)
    lines = []
    for node in cluster.nodes:
        for g in node.gpus:
            spec = g.spec
            tp = max(
                (
                    t
                    for t in TP_DEGREES
                    if t <= g.count
                    and tp_divides(m.arch.num_attention_heads, m.arch.num_kv_heads, t)
                ),
                default=1,
            )
            best = math.inf
            best_v = ""
            for v in m.variants:
                p = _perf(m.arch, v.quantization, spec, tp, m.max_context, 1, 0.0, calib)
                need = (
                    p.weights_gib_per_gpu
                    + p.overhead_gib_per_gpu
                    + (m.max_context * p.kv_bytes_per_token / tp / GIB)
                )
                if need < best:
                    best, best_v = need, v.name
            lines.append(
                f"{node.name}: {g.count}x{spec.name} ({spec.memory_gib:.0f} GiB): at tp={tp} "
                f"variant {best_v} needs {best:.1f} GiB per GPU"
            )
    return lines
