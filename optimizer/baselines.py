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

from collections.abc import Callable
from typing import Any

from planner.optimizer import baseline_parts as parts
from planner.optimizer import serving_rule
from planner.optimizer.baseline_parts import GPU_UTIL, Baseline, gpu_sets
from planner.optimizer.melange import melange
from planner.optimizer.perf import InstancePerf
from planner.optimizer.schedule import all_lazy
from planner.schemas.cluster import Cluster
from planner.schemas.models import ModelEntry, Models
from planner.schemas.plan import Point
from planner.schemas.slo import Slo
from planner.units import GIB

LRU_KV_TOKENS = 65536  # KV an lru instance gets when awake (a few long agent prompts), tokens


def static(cluster: Cluster, models: Models) -> Baseline:
    """Every model awake on its own GPUs; first fit, biggest GPUs first."""
    used: set[tuple[str, int]] = set()

    def place(entry: ModelEntry) -> tuple | None:
        spot = _first_free(cluster, entry, used)
        if spot is not None:
            used.update((spot[1].node, d) for d in spot[1].gpus)
        return spot

    insts, perfs, notes = parts.one_each(models, place, "gpu", "no free GPUs left")
    return Baseline(Point(name="static", instances=insts, notes=notes), perfs)


def _first_free(cluster: Cluster, entry: ModelEntry, used: set[tuple[str, int]]) -> tuple | None:
    """(variant, GPU set, perf) of the first variant and free set that hold the model."""
    for v in parts.variants(entry):
        for s in parts.sets_for(cluster, entry):
            if any((s.node, d) in used for d in s.gpus):
                continue
            perf = parts.perf(entry, v.quantization, s)
            if parts.fits(perf, entry):
                return v, s, perf
    return None


def lru(cluster: Cluster, models: Models) -> Baseline:
    """Every model a host-tier instance with a home GPU set; LRU decides who is awake."""
    load: dict[tuple[str, tuple[int, ...]], float] = {}  # GiB of awake memory homed per set

    def place(entry: ModelEntry) -> tuple | None:
        home = _home(cluster, entry, load)
        if home is not None:
            _, s, perf = home
            load[(s.node, s.gpus)] = load.get((s.node, s.gpus), 0.0) + perf.awake_gib_per_gpu
        return home

    insts, perfs, notes = parts.one_each(models, place, "host", "fits no GPU set")
    mem = {
        (n.name, dev): g.spec.memory_gib * GPU_UTIL
        for n in cluster.nodes
        for dev, g in n.gpu_list()
    }
    return Baseline(
        Point(name="lru", instances=insts, notes=notes),
        perfs,
        policy=serving_rule.LRU,
        gpu_memory_gib=mem,
    )


def _home(
    cluster: Cluster, entry: ModelEntry, load: dict[tuple[str, tuple[int, ...]], float]
) -> tuple | None:
    """(variant, GPU set, perf with `LRU_KV_TOKENS` of KV) of an lru instance's home: the
    first variant that fits somewhere; among its sets, one where it stays awake beside the
    models homed there (`load`) if any, else the least loaded; then the fewest and biggest
    GPUs."""
    best = None
    for v in parts.variants(entry):
        for s in parts.sets_for(cluster, entry):
            tp = len(s.gpus)
            free = s.memory_gib * GPU_UTIL
            full = parts.perf(entry, v.quantization, s, kv_gib=None)
            if not parts.fits(full, entry):
                continue
            kv_tokens = max(LRU_KV_TOKENS, entry.max_context)  # at least one sequence
            kv_gib = kv_tokens * full.kv_bytes_per_token / tp / GIB  # per GPU
            kv_gib = min(kv_gib, full.kv_gib_per_gpu)
            perf = parts.perf(entry, v.quantization, s, kv_gib=kv_gib)
            share = sum(
                w for (node, ids), w in load.items() if node == s.node and set(ids) & set(s.gpus)
            )
            crowded = share + perf.awake_gib_per_gpu > free
            key = (crowded, share / free, tp, -s.memory_gib)
            if best is None or key < best[0]:
                best = (key, v, s, perf)
        if best is not None:
            return best[1:]
    return None


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
        policy=serving_rule.LRU,
        gpu_memory_gib=mem,
        warm_budget_gib=warm_gib,
    )


# name -> builder: a new baseline is a builder (its own module when it is more than a few
# lines, as `melange`) and one line here.
Builder = Callable[[Cluster, Models, Slo, Any], Baseline]
BUILDERS: dict[str, Builder] = {
    "static": lambda cluster, models, slo, trace: static(cluster, models),
    "lru": lambda cluster, models, slo, trace: lru(cluster, models),
    "melange": melange,
}
BASELINES = tuple(BUILDERS)


def build(name: str, cluster: Cluster, models: Models, slo: Slo, trace: Any = None) -> Baseline:
    """The baseline called `name` for these inputs (`melange` needs the trace)."""
    if name not in BUILDERS:
        raise ValueError(f"unknown baseline {name!r}; use one of {BASELINES}")
    return BUILDERS[name](cluster, models, slo, trace)


__all__ = ["BASELINES", "BUILDERS", "Baseline", "build", "gpu_sets", "lru", "lru_matched", "static"]
