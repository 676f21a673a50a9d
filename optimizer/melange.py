"""The `melange` baseline: the cluster a careful operator sizes by hand for peak load.

After Mélange (Griggs et al., 2024: per model, the GPU types and counts that serve its
load at the least cost). An integer program picks, per model, how many instances of
which variant, GPU type and TP to run, each sized by its steady-state throughput within
the model's TTFT/TPOT targets at the trace's mean lengths (the prompt prefix that vLLM's
prefix cache serves is not prefilled again, as the operator measures it). Its objective,
in this order:
1. serve every model's busiest hour (a shortfall is noted);
2. keep each model in its preferred variant (bf16 where it serves, else the smallest
   that does), downgrading one only where the cluster cannot hold them all so;
3. buy the least GPU memory (memory stands for cost here: it is what this project trades).
No tiers, no sharing: each instance owns its GPUs and stays awake; the instances then go
first fit onto concrete GPUs. A model no GPU set serves within its targets still gets the
instances that serve it fastest (noted): an operator deploys every model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.errors import InfeasibleError
from planner.optimizer import baseline_parts as parts
from planner.optimizer.baseline_parts import Baseline, gpu_sets
from planner.optimizer.perf import InstancePerf, steady_state
from planner.optimizer.solver import run_solver
from planner.schemas.cluster import Cluster
from planner.schemas.models import Models
from planner.schemas.plan import Instance, Point
from planner.schemas.slo import Slo

MAX_INSTANCES = 16  # of one option (variant, GPU type, TP) per model
SHORT_WEIGHT = 1000.0  # objective per req/s of unmet peak, in units of the cluster's GiB
NO_DEMAND = {"peak_rps": 0.0, "input_tokens": 2048.0, "cached_tokens": 0.0, "output_tokens": 256.0}


def peak_demand(
    trace: Any, names: list[str], window_s: float = 3600.0
) -> dict[str, dict[str, float]]:
    """Per model: peak requests/s over `window_s` windows and mean input, cached (prefix
    hit) and output tokens."""
    import pandas as pd

    t = np.asarray(trace["timestamp"], dtype=float)
    # model codes straight from the column (no Python string per row)
    codes, uniques = pd.factorize(pd.Series(trace["model"]), sort=False)
    code_of = {str(u): k for k, u in enumerate(uniques)}
    inp = np.asarray(trace["input_tokens"], dtype=float)
    out = np.asarray(trace["output_tokens"], dtype=float)
    cached = (
        np.asarray(trace["cached_tokens"], dtype=float) if "cached_tokens" in trace else 0 * inp
    )
    bins = np.floor((t - (t.min() if len(t) else 0.0)) / window_s).astype(np.int64)
    demand: dict[str, dict[str, float]] = {}
    for name in names:
        sel = codes == code_of.get(name, -2)
        if not sel.any():
            continue
        counts = np.bincount(bins[sel])
        demand[name] = {
            "peak_rps": float(counts.max()) / window_s,
            "input_tokens": float(inp[sel].mean()),
            "cached_tokens": float(np.minimum(cached[sel], inp[sel]).mean()),
            "output_tokens": float(out[sel].mean()),
        }
    return demand


def steady_capacity_rps(
    perf: InstancePerf,
    input_tokens: float,
    output_tokens: float,
    tpot_s: float | None,
    ttft_s: float | None,
    cached_tokens: float = 0.0,
) -> float:
    """Requests/s one instance sustains with its steady-state TPOT/TTFT within target (the
    Mélange sizing; `candidates.capacity_rps` is the MILP's estimate, TPOT and KV only)."""
    best = 0.0
    c = 1
    out_tok = int(max(output_tokens, 1))
    while c <= perf.max_num_seqs:
        ttft, tpot, tok_s = steady_state(
            perf, int(input_tokens), out_tok, c, cached_len=int(cached_tokens)
        )
        if (
            (tpot_s is not None and tpot > tpot_s)
            or (ttft_s is not None and ttft > ttft_s)
            or tok_s <= 0
        ):
            break
        best = max(best, tok_s / out_tok)
        c *= 2
    return best


def _options(entry, d: dict[str, float], slo: Slo, types: dict) -> tuple[list[tuple], bool]:
    """([(variant, GPU type, tp, perf, req/s, preferred)], within targets) for one model.

    Every variant that holds a full-context request; the preferred variant is the first
    (bf16, then by size) with an option within the targets. Where none is, the options
    are sized by throughput alone and the model is flagged."""
    tg = slo.for_model(entry.name)
    fitting = []
    for v in parts.variants(entry):
        for tp in (1, 2, 4, 8):
            if not parts.tp_ok(entry, tp):
                continue
            for gname, (sets, count) in types.items():
                mine = [s for s in sets if len(s.gpus) == tp]
                if not mine or tp > count:
                    continue
                perf = parts.perf(entry, v.quantization, mine[0])
                if parts.fits(perf, entry):
                    fitting.append((v, gname, tp, perf))
    args = (d["input_tokens"], d["output_tokens"])

    def cap(perf: InstancePerf, targets: bool) -> float:
        t = (tg.tpot_p95_s, tg.ttft_p95_s) if targets else (None, None)
        return steady_capacity_rps(perf, *args, *t, cached_tokens=d["cached_tokens"])

    sized = [(v, g, tp, p, cap(p, True)) for v, g, tp, p in fitting]
    within = any(c > 0 for *_, c in sized)
    if not within:
        sized = [(v, g, tp, p, cap(p, False)) for v, g, tp, p in fitting]
    sized = [o for o in sized if o[4] > 0]
    preferred = sized[0][0].name if sized else None  # parts.variants order: bf16, then by size
    return [(*o, o[0].name == preferred) for o in sized], within


def melange(cluster: Cluster, models: Models, slo: Slo, trace: Any) -> Baseline:
    """Per-model variant/GPU type/count ILP for the peak hour (module doc)."""
    if trace is None:
        raise ValueError("the melange baseline needs the trace (peak demand per model)")
    import pulp

    demand = peak_demand(trace, models.names)
    types = _gpu_types(cluster)
    gib = {name: sets[0].memory_gib / len(sets[0].gpus) for name, (sets, _) in types.items()}
    total_gib = sum(gib[name] * count for name, (_, count) in types.items())
    notes: list[str] = []
    options = _all_options(models, demand, slo, types, notes)
    prob = pulp.LpProblem("melange", pulp.LpMinimize)
    x = [
        prob.add_variable(f"x{k}", lowBound=0, upBound=MAX_INSTANCES, cat="Integer")
        for k in range(len(options))
    ]
    short = {
        e.name: prob.add_variable(f"short_{k}", lowBound=0) for k, e in enumerate(models.models)
    }
    memory = pulp.lpSum(x[k] * o[3] * gib[o[2]] for k, o in enumerate(options))  # GiB bought
    downgrades = pulp.lpSum(x[k] for k, o in enumerate(options) if not o[6])  # instances
    # Lexicographic by weights: one downgrade outweighs any memory, unmet peak any downgrade.
    prob += SHORT_WEIGHT * total_gib * pulp.lpSum(short.values()) + total_gib * downgrades + memory
    for entry in models.models:
        mine = [k for k, o in enumerate(options) if o[0] is entry]
        if not mine:
            notes.append(f"{entry.name}: fits no GPU set; its requests fail")
            continue
        prob += pulp.lpSum(x[k] for k in mine) >= 1
        peak = demand.get(entry.name, NO_DEMAND)["peak_rps"]
        prob += pulp.lpSum(x[k] * options[k][5] for k in mine) + short[entry.name] >= peak
    for gname, (_, count) in types.items():
        prob += pulp.lpSum(x[k] * o[3] for k, o in enumerate(options) if o[2] == gname) <= count
    status, _ = run_solver(prob, time_limit_s=60.0)
    if status == "infeasible":
        raise InfeasibleError(
            f"melange baseline: no GPU assignment serves every model ({status})",
            fix="add GPUs or drop a model",
        )
    insts, perfs = _place(cluster, options, [round(v.value() or 0) for v in x], notes)
    for name, var in short.items():
        if (var.value() or 0) > 1e-9:
            notes.append(f"{name}: peak demand exceeds the cluster by {var.value():.3g} req/s")
    return Baseline(Point(name="melange", instances=insts, notes=notes), perfs)


def _gpu_types(cluster: Cluster) -> dict[str, tuple[list, int]]:
    """GPU type -> (its aligned sets of every TP degree, how many GPUs of it)."""
    types: dict[str, tuple[list, int]] = {}
    for node in cluster.nodes:
        for _, g in node.gpu_list():
            prev = types.get(g.spec.name, ([], 0))
            types[g.spec.name] = (prev[0], prev[1] + 1)
    for tp in (1, 2, 4, 8):
        for s in gpu_sets(cluster, tp):
            types[s.group.spec.name][0].append(s)
    return types


def _all_options(
    models: Models, demand: dict, slo: Slo, types: dict[str, tuple[list, int]], notes: list[str]
) -> list[tuple]:
    """Every model's options: (entry, variant, GPU type, tp, perf, req/s, preferred); a note
    for each model that no GPU set serves within its latency targets."""
    options: list[tuple] = []
    for entry in models.models:
        opts, within = _options(entry, demand.get(entry.name, NO_DEMAND), slo, types)
        if opts and not within:
            notes.append(
                f"{entry.name}: no GPU set serves its mean request within its TTFT/TPOT "
                "targets; sized for throughput"
            )
        options += [(entry, *o) for o in opts]
    return options


def _place(
    cluster: Cluster, options: list[tuple], counts: list[int], notes: list[str]
) -> tuple[list[Instance], dict[str, InstancePerf]]:
    """The chosen instances first fit onto concrete aligned GPU sets, biggest first."""
    used: set[tuple[str, int]] = set()
    ports = parts.Ports()
    insts: list[Instance] = []
    perfs: dict[str, InstancePerf] = {}
    count_by_model: dict[str, int] = {}
    for o, n_inst in zip(options, counts, strict=True):
        entry, v, gname, tp = o[:4]
        for _ in range(n_inst):
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
            p = parts.perf(entry, v.quantization, s)
            inst = parts.instance(n, entry, v.name, v.quantization, s, p, "gpu", ports.take(s.node))
            insts.append(inst)
            perfs[inst.id] = p
    return insts, perfs
