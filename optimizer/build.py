"""Turn MILP placements into a plan point: instance ids, ports, engine args, memory."""

from __future__ import annotations

import math

from planner.engines.base import get_engine
from planner.optimizer.milp import Placement
from planner.optimizer.perf.types import InstancePerf
from planner.schemas.models import Models
from planner.schemas.plan import EngineArgs, Instance, MemoryGib, Point, SubstituteRule
from planner.schemas.slo import Slo

BASE_PORT = 8100  # first engine port on each node; the gateway defaults to 8000


def build_point(
    name: str,
    placements: tuple[Placement, ...],
    model_order: list[str],
    engine_args: dict[str, list[str]] | None = None,
) -> tuple[Point, dict[str, InstancePerf]]:
    """A point with stable ids (`<model>-<k>`) and ports (per node, in instance order);
    `engine_args`: model -> vLLM flags of its task (`ModelEntry.engine_args`)."""
    engine_args = engine_args or {}
    rank = {m: i for i, m in enumerate(model_order)}
    ordered = sorted(
        placements,
        key=lambda p: (
            rank.get(p.cand.model, 1 << 30),
            p.gset.node,
            p.gset.gpus,
            p.tier,
            p.cand.key,
        ),
    )
    per_model: dict[str, int] = {}
    per_node_port: dict[str, int] = {}
    instances: list[Instance] = []
    perfs: dict[str, InstancePerf] = {}
    for p in ordered:
        c = p.cand
        k = per_model.get(c.model, 0)
        per_model[c.model] = k + 1
        port = per_node_port.get(p.gset.node, BASE_PORT)
        per_node_port[p.gset.node] = port + 1
        perf = c.perf
        # vLLM budgets gpu_memory_utilization x device memory for this process; round up to 1%.
        util = min(0.98, math.ceil(100 * perf.awake_gib_per_gpu / p.gset.memory_gib + 0.5) / 100)
        inst = Instance(
            id=f"{c.model}-{k}",
            model=c.model,
            variant=c.variant,
            node=p.gset.node,
            gpus=list(p.gset.gpus),
            tp=c.tp,
            tier=p.tier,
            memory_gib=memory_gib(perf, 3),
            engine=EngineArgs(
                gpu_memory_utilization=util,
                max_model_len=c.max_model_len,
                max_num_seqs=c.max_num_seqs,
                max_num_batched_tokens=perf.chunk_tokens,
                quantization=get_engine().quantization_flag(c.quantization),
                extra_args=list(engine_args.get(c.model, ())),
            ),
            port=port,
        )
        instances.append(inst)
        perfs[inst.id] = perf
    return Point(name=name, instances=instances), perfs


def memory_gib(perf: InstancePerf, digits: int) -> MemoryGib:
    """An instance's memory per GPU as a plan records it, rounded to `digits` decimals; the
    KV cache rounded up: a budget of exactly one `max_model_len` sequence rounded down holds
    none, and the plan would not start (vLLM, and `validate`, read the recorded figure)."""
    scale = 10**digits
    return MemoryGib(
        weights=round(perf.weights_gib_per_gpu, digits),
        kv=math.ceil(perf.kv_gib_per_gpu * scale - 1e-9) / scale,
        overhead=round(perf.overhead_gib_per_gpu, digits),
        asleep=round(perf.context_gib_per_gpu, digits),
    )


def substitute_rules(models: Models, slo: Slo) -> dict[str, SubstituteRule]:
    """The points' substitute rules from models.yaml (`substitutes`, `substitute_when`,
    `wake_on_substitute`) and each model's switch SLO (the wait a stand-in saves it from)."""
    return {
        m.name: SubstituteRule(
            when=m.substitute_when,
            max_wait_s=slo.for_model(m.name).switch_p95_s,
            wake=m.wake_on_substitute,
            to=list(m.substitutes),
        )
        for m in models.models
        if m.substitutes and m.substitute_when != "never"
    }
