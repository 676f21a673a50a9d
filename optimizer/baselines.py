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
- `melange`: an integer program picks, per model, how many instances of which GPU type
  and TP to run so the peak-hour request rate is served within the TPOT/TTFT targets at
  the least GPU memory bought (memory stands for cost here: it is what this project
  trades); no tiers, no sharing; then the instances go first-fit onto concrete GPUs.

Each builder returns a `Baseline`: the point, its perfs and how to simulate it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import InfeasibleError
from planner.optimizer.candidates import GpuSet
from planner.optimizer.candidates import gpu_sets as candidate_sets
from planner.optimizer.perf import InstancePerf, instance_perf, steady_state
from planner.optimizer.perf.memory import weights_bytes
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

    def simulate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `simulate` for this baseline."""
        return {"policy": self.policy, "gpu_memory_gib": self.gpu_memory_gib or None}


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
    """The KV cache holds at least one full-context request."""
    return perf.max_kv_tokens >= min(entry.max_context, 8192)


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
        ),
        engine=EngineArgs(
            gpu_memory_utilization=util, max_model_len=entry.max_context, max_num_seqs=MAX_NUM_SEQS
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
                    kv_gib = LRU_KV_TOKENS * full.kv_bytes_per_token / tp / GIB  # per GPU
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


def peak_demand(
    trace: Any, names: list[str], window_s: float = 3600.0
) -> dict[str, dict[str, float]]:
    """Per model: peak requests/s over `window_s` windows and mean input/output tokens."""
    t = np.asarray(trace["timestamp"], dtype=float)
    model = np.asarray(trace["model"], dtype=object).astype(str)
    inp = np.asarray(trace["input_tokens"], dtype=float)
    out = np.asarray(trace["output_tokens"], dtype=float)
    cached = (
        np.asarray(trace["cached_tokens"], dtype=float) if "cached_tokens" in trace else 0 * inp
    )
    bins = np.floor((t - (t.min() if len(t) else 0.0)) / window_s).astype(np.int64)
    demand: dict[str, dict[str, float]] = {}
    for name in names:
        sel = model == name
        if not sel.any():
            continue
        counts = np.bincount(bins[sel])
        demand[name] = {
            "peak_rps": float(counts.max()) / window_s,
            "input_tokens": float(inp[sel].mean()),
            "new_tokens": float((inp[sel] - cached[sel]).mean()),
            "output_tokens": float(out[sel].mean()),
        }
    return demand


def capacity_rps(
    perf: InstancePerf,
    input_tokens: float,
    output_tokens: float,
    tpot_s: float | None,
    ttft_s: float | None,
) -> float:
    """Requests/s one instance sustains with its steady-state TPOT/TTFT within target."""
    best = 0.0
    c = 1
    while c <= perf.max_num_seqs:
        ttft, tpot, tok_s = steady_state(perf, int(input_tokens), int(max(output_tokens, 1)), c)
        if (
            (tpot_s is not None and tpot > tpot_s)
            or (ttft_s is not None and ttft > ttft_s)
            or tok_s <= 0
        ):
            break
        best = max(best, tok_s / max(output_tokens, 1.0))
        c *= 2
    return best


def melange(cluster: Cluster, models: Models, slo: Slo, trace: Any) -> Baseline:
    """Per-model GPU type/count ILP at minimum GPU memory, meeting peak-hour throughput."""
    import pulp

    names = models.names
    demand = peak_demand(trace, names)
    # Options: (model, variant, GPU type, tp) with a per-instance capacity.
    types: dict[str, tuple[GpuSet, int]] = {}  # type -> (sample set, GPUs of that type)
    for node in cluster.nodes:
        for _, g in node.gpu_list():
            sample = next(s for s in gpu_sets(cluster, 1) if s.group.spec.name == g.spec.name)
            prev = types.get(g.spec.name, (sample, 0))
            types[g.spec.name] = (prev[0], prev[1] + 1)
    options = []
    for entry in models.models:
        d = demand.get(
            entry.name,
            {"peak_rps": 0.0, "input_tokens": 2048.0, "new_tokens": 2048.0, "output_tokens": 256.0},
        )
        tg = slo.for_model(entry.name)
        for v in _variants(entry):
            for tp in (1, 2, 4, 8):
                if not _tp_ok(entry, tp):
                    continue
                for gname, (_, count) in types.items():
                    sets = [s for s in gpu_sets(cluster, tp) if s.group.spec.name == gname]
                    if not sets or tp > count:
                        continue
                    perf = _perf(entry, v.quantization, sets[0])
                    if not _fits(perf, entry):
                        continue
                    cap = capacity_rps(
                        perf, d["input_tokens"], d["output_tokens"], tg.tpot_p95_s, tg.ttft_p95_s
                    )
                    if cap <= 0:
                        continue
                    options.append((entry, v, gname, tp, perf, cap, d["peak_rps"]))
            if any(o[0] is entry for o in options):
                break  # bf16 where it serves, else the smallest variant that does
    prob = pulp.LpProblem("melange", pulp.LpMinimize)
    x = [
        prob.add_variable(f"x{k}", lowBound=0, upBound=16, cat="Integer")
        for k in range(len(options))
    ]
    short = {
        e.name: prob.add_variable(f"short_{k}", lowBound=0) for k, e in enumerate(models.models)
    }
    cost = pulp.lpSum(x[k] * o[3] * types[o[2]][0].memory_gib for k, o in enumerate(options))
    prob += cost + 1e4 * pulp.lpSum(short.values())  # unmet peak demand is far costlier
    for entry in models.models:
        mine = [k for k, o in enumerate(options) if o[0] is entry]
        if not mine:
            continue
        prob += pulp.lpSum(x[k] for k in mine) >= 1
        peak = options[mine[0]][6]
        prob += pulp.lpSum(x[k] * options[k][5] for k in mine) + short[entry.name] >= peak
    for gname, (_, count) in types.items():
        prob += pulp.lpSum(x[k] * o[3] for k, o in enumerate(options) if o[2] == gname) <= count
    solver = (
        pulp.HiGHS(msg=False) if pulp.HiGHS(msg=False).available() else pulp.PULP_CBC_CMD(msg=False)
    )
    prob.solve(solver)
    if pulp.LpStatus[prob.status] != "Optimal":
        raise InfeasibleError(
            f"melange baseline: no GPU assignment serves every model ({pulp.LpStatus[prob.status]})",
            fix="add GPUs or drop a model",
        )
    used: set[tuple[str, int]] = set()
    ports = _Ports()
    insts: list[Instance] = []
    perfs: dict[str, InstancePerf] = {}
    notes: list[str] = []
    count_by_model: dict[str, int] = {}
    for k, o in enumerate(options):
        entry, v, gname, tp, perf, _, _ = o
        for _ in range(round(x[k].value() or 0)):
            s = next(
                (
                    s
                    for s in gpu_sets(cluster, tp)
                    if s.group.spec.name == gname and not any((s.node, d) in used for d in s.gpus)
                ),
                None,
            )
            if s is None:
                notes.append(f"{entry.name}: no aligned {tp}x{gname} set left")
                continue
            used.update((s.node, d) for d in s.gpus)
            n = count_by_model.get(entry.name, 0)
            count_by_model[entry.name] = n + 1
            p = _perf(entry, v.quantization, s)
            inst = _instance(n, entry, v.name, v.quantization, s, p, "gpu", ports.take(s.node))
            insts.append(inst)
            perfs[inst.id] = p
    for name, var in short.items():
        if (var.value() or 0) > 1e-9:
            notes.append(f"{name}: peak demand exceeds the cluster by {var.value():.3g} req/s")
    return Baseline(Point(name="melange", instances=insts, notes=notes), perfs)


def build(name: str, cluster: Cluster, models: Models, slo: Slo, trace: Any = None) -> Baseline:
    """The baseline called `name` for these inputs (`melange` needs the trace)."""
    if name == "static":
        return static(cluster, models)
    if name == "lru":
        return lru(cluster, models)
    if name == "melange":
        if trace is None:
            raise ValueError("the melange baseline needs the trace (peak demand per model)")
        return melange(cluster, models, slo, trace)
    raise ValueError(f"unknown baseline {name!r}; use one of {BASELINES}")
