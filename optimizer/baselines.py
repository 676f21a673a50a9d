"""The three baselines every plan is measured against (docs/baselines.md), built as plan points so
they go through the same simulator on the same trace.

- `static`: every model always awake, one instance each, bf16 where it fits else the
  smallest variant, first fit on the biggest free GPUs (each instance owns its GPUs and
  lets vLLM take `gpu_memory_utilization` of them, as people configure it by hand).
- `lru`: every model gets a host-tier instance on a home GPU set (bf16 where it fits; a
  set where it can stay awake next to the models already homed there if any, else the
  least loaded one; KV for `LRU_KV_TOKENS`); the simulator runs with
  `policy="lru"`: as many models awake as GPU memory holds, and a miss wakes its model,
  putting the least recently used co-tenants to sleep until it fits (reactive swapping,
  no plan).
- `melange` (optimizer/melange.py): what a careful operator sizes by hand: per model, the
  variant, GPU type, TP and count that serve its busiest hour within the TTFT/TPOT
  targets at the least GPU memory bought; no tiers, no sharing.
- `lru@POINT` (`lru_matched`): a plan point's own instances (GPUs, variants, TP, KV) with
  no planned tiers: every instance is lazy and the simulator runs `policy="lru"` within
  the GPU memory and within a cap on the whole point's warm memory at every instant
  (`warm_gib`). `scoring.twin_result` raises that cap from the point's time-average warm
  GiB while the twin's own time-average stays within the point's: reactive swapping as
  strong as the same memory lets it be. This is the fair comparison: reactive swapping
  against planned tiers on the same hardware at the same memory.

Each builder returns a `Baseline`: the point, its perfs and how to simulate it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.optimizer.candidates import GpuSet
from planner.optimizer.candidates import gpu_sets as candidate_sets
from planner.optimizer.perf import InstancePerf, instance_perf
from planner.optimizer.perf.memory import weights_bytes
from planner.optimizer.schedule import all_lazy
from planner.schemas import tp_divides
from planner.schemas.cluster import Cluster
from planner.schemas.models import ModelEntry, Models
from planner.schemas.plan import EngineArgs, Instance, MemoryGib, Point
from planner.schemas.slo import Slo
from planner.units import GIB

BASELINES = ("static", "lru", "melange")
PORT0 = 8100  # first port of baseline instances on each node
GPU_UTIL = 0.9  # vLLM's default gpu_memory_utilization
MAX_NUM_SEQS = 64  # batch cap of baseline instances
LRU_KV_TOKENS = 65536  # KV an lru instance gets when awake (a few long agent prompts), tokens


@dataclass
class Baseline:
    """A baseline point and how the simulator must run it."""

    point: Point
    perfs: dict[str, InstancePerf]
    policy: str = "plan"
    gpu_memory_gib: dict[tuple[str, int], float] = field(default_factory=dict)
    warm_budget_gib: float | None = None  # cap on the whole point's warm memory, GiB

    def simulate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `simulate` for this baseline."""
        return {
            "policy": self.policy,
            "gpu_memory_gib": self.gpu_memory_gib or None,
            "warm_budget_gib": self.warm_budget_gib,
        }


def gpu_sets(cluster: Cluster, tp: int) -> list[GpuSet]:
    """Aligned runs of exactly `tp` GPUs inside each group, biggest GPUs first (stable)."""
    return sorted(
        (s for s in candidate_sets(cluster, tp) if len(s.gpus) == tp), key=lambda s: -s.memory_gib
    )


def _tp_ok(entry: ModelEntry, tp: int) -> bool:
    return tp_divides(entry.arch.num_attention_heads, entry.arch.num_kv_heads, tp)


def _variants(entry: ModelEntry) -> list:
    """bf16 first, then the others by weight size (smallest first)."""
    first = [v for v in entry.variants if v.quantization == "bf16"]
    rest = sorted(
        (v for v in entry.variants if v.quantization != "bf16"),
        key=lambda v: weights_bytes(entry.arch, v.quantization),
    )
    return first + rest


def _perf(
    entry: ModelEntry, quant: str, s: GpuSet, *, kv_gib: float | None = None, util: float = GPU_UTIL
) -> InstancePerf:
    return instance_perf(
        entry.arch,
        quant,
        s.group.spec,
        len(s.gpus),
        gpu_memory_utilization=util,
        max_model_len=entry.max_context,
        max_num_seqs=MAX_NUM_SEQS,
        kv_gib=kv_gib,
        interconnect=s.group.interconnect,
    )


def _fits(perf: InstancePerf, entry: ModelEntry) -> bool:
    """vLLM would start it: the KV cache holds one sequence of `max_context` tokens (the
    engine's max_model_len; `InstancePerf.fits`, the rule of `invariants` too)."""
    return perf.fits and perf.max_model_len == entry.max_context


def _instance(
    k: int,
    entry: ModelEntry,
    variant: str,
    quant: str,
    s: GpuSet,
    perf: InstancePerf,
    tier: str,
    port: int,
    util: float = GPU_UTIL,
) -> Instance:
    return Instance(
        id=f"{entry.name}-{k}",
        model=entry.name,
        variant=variant,
        node=s.node,
        gpus=list(s.gpus),
        tp=len(s.gpus),
        tier=tier,
        memory_gib=MemoryGib(
            weights=round(perf.weights_gib_per_gpu, 6),
            kv=round(perf.kv_gib_per_gpu, 6),
            overhead=round(perf.overhead_gib_per_gpu, 6),
            asleep=round(perf.context_gib_per_gpu, 6),
        ),
        engine=EngineArgs(
            gpu_memory_utilization=util,
            max_model_len=entry.max_context,
            max_num_seqs=MAX_NUM_SEQS,
            extra_args=entry.engine_args,
        ),
        port=port,
    )


class _Ports:
    def __init__(self) -> None:
        self.next: dict[str, int] = {}

    def take(self, node: str) -> int:
        p = self.next.get(node, PORT0)
        self.next[node] = p + 1
        return p


def _by_size(models: Models) -> list[ModelEntry]:
    """Biggest models first: they have the fewest places to go."""
    return sorted(models.models, key=lambda m: -weights_bytes(m.arch, "bf16"))


def static(cluster: Cluster, models: Models) -> Baseline:
    """Every model awake on its own GPUs; first fit, biggest GPUs first."""
    used: set[tuple[str, int]] = set()
    ports = _Ports()
    insts: list[Instance] = []
    perfs: dict[str, InstancePerf] = {}
    notes: list[str] = []
    for entry in _by_size(models):
        placed = False
        for v in _variants(entry):
            for tp in (1, 2, 4, 8):
                if not _tp_ok(entry, tp):
                    continue
                for s in gpu_sets(cluster, tp):
                    if any((s.node, d) in used for d in s.gpus):
                        continue
                    perf = _perf(entry, v.quantization, s)
                    if not _fits(perf, entry):
                        continue
                    inst = _instance(
                        0, entry, v.name, v.quantization, s, perf, "gpu", ports.take(s.node)
                    )
                    insts.append(inst)
                    perfs[inst.id] = perf
                    used.update((s.node, d) for d in s.gpus)
                    placed = True
                    break
                if placed:
                    break
            if placed:
                break
        if not placed:
            notes.append(f"{entry.name}: no free GPUs left; its requests fail")
    return Baseline(Point(name="static", instances=insts, notes=notes), perfs)


def lru(cluster: Cluster, models: Models) -> Baseline:
    """Every model a host-tier instance with a home GPU set; LRU decides who is awake."""
    load: dict[tuple[str, tuple[int, ...]], float] = {}  # GiB of awake memory homed per set
    ports = _Ports()
    insts: list[Instance] = []
    perfs: dict[str, InstancePerf] = {}
    notes: list[str] = []
    for entry in _by_size(models):
        best = None
        for v in _variants(entry):
            for tp in (1, 2, 4, 8):
                if not _tp_ok(entry, tp):
                    continue
                for s in gpu_sets(cluster, tp):
                    free = s.memory_gib * GPU_UTIL
                    full = _perf(entry, v.quantization, s, kv_gib=None)
                    if not _fits(full, entry):
                        continue
                    kv_tokens = max(LRU_KV_TOKENS, entry.max_context)  # at least one sequence
                    kv_gib = kv_tokens * full.kv_bytes_per_token / tp / GIB  # per GPU
                    kv_gib = min(kv_gib, full.kv_gib_per_gpu)
                    perf = _perf(entry, v.quantization, s, kv_gib=kv_gib)
                    share = sum(
                        w
                        for (node, ids), w in load.items()
                        if node == s.node and set(ids) & set(s.gpus)
                    )
                    # Awake next to its co-tenants if possible, else the least loaded set;
                    # then the fewest and biggest GPUs.
                    crowded = share + perf.awake_gib_per_gpu > free
                    key = (crowded, share / free, tp, -s.memory_gib)
                    if best is None or key < best[0]:
                        best = (key, v, s, perf)
            if best is not None:
                break
        if best is None:
            notes.append(f"{entry.name}: fits no GPU set; its requests fail")
            continue
        _, v, s, perf = best
        load[(s.node, s.gpus)] = load.get((s.node, s.gpus), 0.0) + perf.awake_gib_per_gpu
        inst = _instance(0, entry, v.name, v.quantization, s, perf, "host", ports.take(s.node))
        insts.append(inst)
        perfs[inst.id] = perf
    mem = {
        (n.name, dev): g.spec.memory_gib * GPU_UTIL
        for n in cluster.nodes
        for dev, g in n.gpu_list()
    }
    return Baseline(
        Point(name="lru", instances=insts, notes=notes), perfs, policy="lru", gpu_memory_gib=mem
    )


def lru_matched(
    point: Point,
    perfs: dict[str, InstancePerf],
    cluster: Cluster,
    warm_gib: float,
    *,
    gpu_margin: float = 0.0,
    host_margin: float = 0.0,
) -> Baseline:
    """`lru@<point>`: the point's instances, all lazy, LRU within its warm GiB (module doc).

    An always-awake instance becomes a host-tier sleeper while its node's RAM (less
    `host_margin`) holds the weights of the host-tier ones, else a disk-tier one.
    """
    lazy = all_lazy(point, perfs, cluster, host_margin)
    # Reactive: no awake hours, no idle sleeps; the point's stand-ins (the same gateway).
    insts = [i.model_copy(update={"awake_hours": []}) for i in lazy.instances]
    mem = {
        (n.name, dev): g.spec.memory_gib * (1 - gpu_margin)
        for n in cluster.nodes
        for dev, g in n.gpu_list()
    }
    return Baseline(
        Point(name=f"lru@{point.name}", instances=insts, substitutes=point.substitutes),
        dict(perfs),
        policy="lru",
        gpu_memory_gib=mem,
        warm_budget_gib=warm_gib,
    )


def build(name: str, cluster: Cluster, models: Models, slo: Slo, trace: Any = None) -> Baseline:
    """The baseline called `name` for these inputs (`melange` needs the trace)."""
    if name == "static":
        return static(cluster, models)
    if name == "lru":
        return lru(cluster, models)
    if name == "melange":
        if trace is None:
            raise ValueError("the melange baseline needs the trace (peak demand per model)")
        from planner.optimizer.melange import melange  # it builds on this module's helpers

        return melange(cluster, models, slo, trace)
    raise ValueError(f"unknown baseline {name!r}; use one of {BASELINES}")
