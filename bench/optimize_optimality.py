"""The whole search against exhaustive enumeration of the same space on a small instance.

Two L40S GPUs, three models. The search explores knobs (headroom, KV factor, max_num_seqs,
objective weights, which models may sleep) and lets the MILP place instances. The
enumeration covers the same placements: at every max_num_seqs the search may pick and at
KV factors across its range (its ends and 1.0: the search's continuous knob on a grid),
every combination that gives each model one instance (any variant, GPU set, tier and KV
level of those candidates; every model may sleep) is simulated on the same trace and scored
with the search's own objective (normalized switch P95 + warm share + SLO shortfall).
Headroom and the weights only steer the MILP among these placements. Target: the search's
best within 5% of the enumerated best.
"""

from __future__ import annotations

import itertools
import sys
import time

from planner.app import files as inputs
from planner.optimizer.build import build_point
from planner.optimizer.candidates import Knobs
from planner.optimizer.config import OptimizeConfig
from planner.optimizer.evaluation import Evaluation
from planner.optimizer.milp import Placement, placement_options
from planner.optimizer.scoring import scorer
from planner.optimizer.search import Searcher, SearchInputs
from planner.optimizer.workload.synth import synth
from planner.optimizer.workload.synth_spec import bind_models, default_spec
from planner.schemas import parse

LAM = 1.0  # the balanced phase's weight of warm memory


def fits(combo: tuple[Placement, ...], usable: dict, ram: dict) -> bool:
    awake: dict = {}
    slot: dict = {}
    ctx: dict = {}
    host: dict = {}
    for p in combo:
        for g in p.gset.gpus:
            k = (p.gset.node, g)
            if p.tier == "gpu":
                awake[k] = awake.get(k, 0.0) + p.cand.perf.awake_gib_per_gpu
            else:
                slot[k] = max(slot.get(k, 0.0), p.cand.perf.awake_gib_per_gpu)
                ctx[k] = ctx.get(k, 0.0) + p.cand.perf.context_gib_per_gpu
        if p.tier == "host":
            host[p.gset.node] = host.get(p.gset.node, 0.0) + p.cand.perf.weights_host_gib
    return all(
        awake.get(k, 0) + slot.get(k, 0) + ctx.get(k, 0) <= u for k, u in usable.items()
    ) and all(v <= ram[n] for n, v in host.items())


def main() -> int:
    inputs.silence_solver_banner()
    cluster = parse(
        {
            "kind": "cluster",
            "name": "pair",
            "nodes": [
                {"name": "n0", "cpu_memory_gib": 128, "gpus": [{"type": "L40S", "count": 2}]}
            ],
        },
        "cluster",
    )
    models = parse(
        {
            "kind": "models",
            "models": [
                {
                    "name": "planner-7b",
                    "architecture": "Qwen2.5-7B-Instruct",
                    "max_context": 16384,
                    "variants": [
                        {"name": "bf16", "quantization": "bf16"},
                        {"name": "awq", "quantization": "awq", "quality_penalty": 0.03},
                    ],
                },
                {
                    "name": "coder-32b",
                    "architecture": "Qwen2.5-Coder-32B-Instruct",
                    "max_context": 16384,
                    "variants": [{"name": "awq", "quantization": "awq"}],
                },
                {
                    "name": "summarizer-8b",
                    "architecture": "Llama-3.1-8B-Instruct",
                    "max_context": 16384,
                    "variants": [{"name": "bf16", "quantization": "bf16"}],
                },
            ],
        },
        "models",
    )
    slo = parse(
        {
            "kind": "slo",
            "default": {"ttft_p95_s": 4.0, "tpot_p95_s": 0.15, "switch_p95_s": 15.0},
            "attainment": 0.9,
        },
        "slo",
    )
    spec, _ = bind_models(
        default_spec().model_copy(
            update={"users": 4, "days": 2, "adopted_role": None, "switch_role": None}
        ),
        models.names,
    )
    trace = synth(spec, seed=3)
    score = scorer(trace, slo)
    cfg = OptimizeConfig(evals=24, max_replicas=1, max_tp=2)
    searcher = Searcher(SearchInputs(cluster, models, slo, trace, cfg, score))

    t0 = time.perf_counter()
    res = searcher.run()
    search_best = min(searcher.scalar(e, LAM) for e in res.evaluations)
    t1 = time.perf_counter()

    best, best_knobs = float("inf"), None
    n_sim = n_combos = 0
    lo, hi = cfg.kv_factor_range
    for seqs in cfg.max_num_seqs_choices:
        for kv in (lo, 1.0, hi):
            knobs = Knobs(kv_factor=kv, max_num_seqs=seqs, may_sleep=frozenset(models.names))
            inp = searcher.milp_input(knobs)
            opts = placement_options(inp)
            per_model = [[p for p in opts if p.cand.model == m] for m in models.names]
            for combo in itertools.product(*per_model):
                n_combos += 1
                if not fits(combo, inp.gpu_usable_gib, inp.node_ram_gib):
                    continue
                point, perfs = build_point("enum", combo, models.names)
                m = score(point, perfs)
                n_sim += 1
                v = searcher.scalar(Evaluation(0, knobs, None, point, perfs, m), LAM)
                if v < best:
                    best, best_knobs = v, (seqs, kv)
    t2 = time.perf_counter()
    gap = (search_best - best) / best if best > 0 else 0.0
    print(
        f"trace {len(trace)} requests; search: {len(res.evaluations)} evaluations in {t1 - t0:.1f} s, best objective {search_best:.4f}"
    )
    print(
        f"enumeration over max_num_seqs {list(cfg.max_num_seqs_choices)} x KV factor "
        f"{[lo, 1.0, hi]}: {n_combos} combinations, {n_sim} fit and simulated in {t2 - t1:.1f} s, "
        f"best objective {best:.4f} (max_num_seqs, KV factor of the best: {best_knobs})"
    )
    ok = gap <= 0.05
    print(
        f"RESULT split=same_space search_best={search_best:.5f} enumerated_best={best:.5f} "
        f"gap={gap:.4f} within_5pct={ok} enumerated={n_sim} pass={int(ok)}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
