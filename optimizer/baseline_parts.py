"""What every baseline builder shares (optimizer/baselines.py, optimizer/melange.py): the
`Baseline` they return, how a baseline sizes and names its instances, and the order in which
it tries variants, TPs and GPU sets."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from planner.optimizer.build import memory_gib
from planner.optimizer.candidates import GpuSet
from planner.optimizer.candidates import gpu_sets as candidate_sets
from planner.optimizer.perf import InstancePerf, instance_perf
from planner.optimizer.perf.memory import weights_bytes
from planner.optimizer.serving_rule import PLAN, EvictionPolicy
from planner.schemas import tp_divides
from planner.schemas.cluster import Cluster
from planner.schemas.models import ModelEntry, Models
from planner.schemas.plan import EngineArgs, Instance, Point

PORT0 = 8100  # first port of baseline instances on each node
GPU_UTIL = 0.9  # vLLM's default gpu_memory_utilization
MAX_NUM_SEQS = 64  # batch cap of baseline instances
LRU_KV_TOKENS = 65536  # KV an lru instance gets when awake (a few long agent prompts), tokens


@dataclass
class Baseline:
    """A baseline point and how the simulator must run it."""

    point: Point
    perfs: dict[str, InstancePerf]
    policy: EvictionPolicy = PLAN
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


def tp_ok(entry: ModelEntry, tp: int) -> bool:
    """The model's heads split evenly over `tp` GPUs."""
    return tp_divides(entry.arch.num_attention_heads, entry.arch.num_kv_heads, tp)


def sets_for(cluster: Cluster, entry: ModelEntry) -> Iterator[GpuSet]:
    """The GPU sets the model may run on: by TP (1, 2, 4, 8, those that split its heads),
    then as `gpu_sets` orders them."""
    for tp in (1, 2, 4, 8):
        if tp_ok(entry, tp):
            yield from gpu_sets(cluster, tp)


def variants(entry: ModelEntry) -> list:
    """bf16 first, then the others by weight size (smallest first)."""
    first = [v for v in entry.variants if v.quantization == "bf16"]
    rest = sorted(
        (v for v in entry.variants if v.quantization != "bf16"),
        key=lambda v: weights_bytes(entry.arch, v.quantization),
    )
    return first + rest


def perf(
    entry: ModelEntry, quant: str, s: GpuSet, *, kv_gib: float | None = None, util: float = GPU_UTIL
) -> InstancePerf:
    """The instance's performance as a baseline configures it (`MAX_NUM_SEQS`)."""
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


def fits(perf: InstancePerf, entry: ModelEntry) -> bool:
    """vLLM would start it: the KV cache holds one sequence of `max_context` tokens (the
    engine's max_model_len; `InstancePerf.fits`, the rule of `invariants` too)."""
    return perf.fits and perf.max_model_len == entry.max_context


def instance(
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
    """The plan instance `<model>-<k>` of a baseline on the GPU set `s`."""
    return Instance(
        id=f"{entry.name}-{k}",
        model=entry.name,
        variant=variant,
        node=s.node,
        gpus=list(s.gpus),
        tp=len(s.gpus),
        tier=tier,
        memory_gib=memory_gib(perf, 6),
        engine=EngineArgs(
            gpu_memory_utilization=util,
            max_model_len=entry.max_context,
            max_num_seqs=MAX_NUM_SEQS,
            extra_args=entry.engine_args,
        ),
        port=port,
    )


class Ports:
    """Ports of baseline instances, one after another per node from `PORT0`."""

    def __init__(self) -> None:
        self.next: dict[str, int] = {}

    def take(self, node: str) -> int:
        """The next free port on `node`."""
        p = self.next.get(node, PORT0)
        self.next[node] = p + 1
        return p


def by_size(models: Models) -> list[ModelEntry]:
    """Biggest models first: they have the fewest places to go."""
    return sorted(models.models, key=lambda m: -weights_bytes(m.arch, "bf16"))


def one_each(
    models: Models, place: Callable[[ModelEntry], tuple | None], tier: str, why_not: str
) -> tuple[list[Instance], dict[str, InstancePerf], list[str]]:
    """One instance of each model, biggest first, where `place` puts it ((variant, GPU set,
    perf), or None: noted with `why_not`, its requests fail); with its perfs and the notes."""
    ports = Ports()
    insts: list[Instance] = []
    perfs: dict[str, InstancePerf] = {}
    notes: list[str] = []
    for entry in by_size(models):
        spot = place(entry)
        if spot is None:
            notes.append(f"{entry.name}: {why_not}; its requests fail")
            continue
        v, s, p = spot
        inst = instance(0, entry, v.name, v.quantization, s, p, tier, ports.take(s.node))
        insts.append(inst)
        perfs[inst.id] = p
    return insts, perfs, notes
