"""The checks every plan passes before a command acts on it (pure: plan + inputs in, problems out).

`check_plan` is the one plan check: `planner validate PLAN` runs it, and so does every
command that reads a plan, before any side effect. Per instance: its node, GPUs, model and
variant exist; `gpus` lists `tp` distinct devices; TP divides the heads; `max_model_len` is
within the model's `max_context`; the KV cache holds one `max_model_len` sequence (vLLM
refuses to start otherwise); the engine's memory budget (`gpu_memory_utilization` x
device memory) holds what the instance needs. Per point: every model of the models file is
served. Per GPU, the memory invariant of docs/plan-format.md: the awake memory of the `gpu`-tier
instances + the largest awake `host`/`disk` instance + the CUDA contexts the other sleepers
keep fit the device, and so do the `gpu_memory_utilization` budgets (vLLM refuses to start
when less than its budget is free). Per node: RAM for `host`-tier weights and CPU offload.

An instance's weights are the larger of what the plan records and what the perf model gives
for its model, variant and TP (an edited plan cannot under-state them); its KV budget and
overhead are the plan's (the optimizer recorded them from the calibrated perf model).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.errors import InputError
from planner.optimizer.perf import default_calib
from planner.optimizer.sim.perfs import perf_for_instance
from planner.schemas import tp_problem
from planner.schemas.cluster import Cluster
from planner.schemas.common import did_you_mean
from planner.schemas.models import ModelEntry, Models
from planner.schemas.plan import Instance, Plan, Point

_GIB_TOL = 0.01  # recorded memory is rounded to 3 decimals, utilizations up to 1%, GiB
_UTIL_TOL = 1e-6  # share of a device
_KV_ROUND_GIB = 0.0005  # the plan rounds memory_gib.kv to 3 decimals: at most this below, GiB


@dataclass(frozen=True)
class Problem:
    """One reason a plan cannot be applied: where in the plan file, what, and the fix."""

    path: str
    message: str
    fix: str


def _remote_code_problems(inst: Instance, where: str, entry: ModelEntry) -> list[Problem]:
    """`--trust-remote-code` only for a variant models.yaml marks `trust_remote_code: true`."""
    from planner.engines.base import get_engine

    arg = get_engine(inst.engine.kind).asks_remote_code(inst.engine.extra_args)
    variant = next((v for v in entry.variants if v.name == inst.variant), None)
    if arg is None or variant is None or variant.trust_remote_code:
        return []
    return [
        Problem(
            f"{where}.engine.extra_args",
            f"extra_args sets {arg!r} but models.yaml does not mark {entry.name!r} variant "
            f"{inst.variant!r} trust_remote_code: true (it runs the checkpoint's own Python)",
            f"add `trust_remote_code: true` to that variant in the models file if you trust "
            f"the checkpoint, or drop {arg!r}",
        )
    ]


def _instance_problems(
    inst: Instance, where: str, cluster: Cluster, models: Models
) -> list[Problem]:
    """What is wrong with one instance on its own; empty when it can be placed."""
    nodes = [n.name for n in cluster.nodes]
    try:
        node = cluster.node(inst.node)
    except KeyError:
        return [
            Problem(
                f"{where}.node",
                f"node {inst.node!r} is not in the cluster{did_you_mean(inst.node, nodes)}",
                f"use one of {nodes}",
            )
        ]
    try:
        entry = models.model(inst.model)
    except KeyError:
        return [
            Problem(
                f"{where}.model",
                f"model {inst.model!r} is not in the models file{did_you_mean(inst.model, models.names)}",
                f"use one of {models.names}",
            )
        ]
    out: list[Problem] = []
    variants = [v.name for v in entry.variants]
    if inst.variant not in variants:
        out.append(
            Problem(
                f"{where}.variant",
                f"variant {inst.variant!r} is not a variant of {entry.name!r}"
                f"{did_you_mean(inst.variant, variants)}",
                f"use one of {variants}",
            )
        )
    ids = node.device_ids()
    if len(inst.gpus) != inst.tp:
        out.append(
            Problem(
                f"{where}.gpus",
                f"tp={inst.tp} needs {inst.tp} GPU ids, gpus lists {len(inst.gpus)}",
                f"list {inst.tp} distinct device ids of node {node.name!r} ({ids})",
            )
        )
    bad = [g for g in inst.gpus if g not in ids]
    if bad:
        out.append(
            Problem(
                f"{where}.gpus",
                f"GPU ids {bad} do not exist on node {node.name!r} (it has {ids})",
                "use device ids the node has",
            )
        )
    bad_tp = tp_problem(entry.arch.num_attention_heads, entry.arch.num_kv_heads, inst.tp)
    if bad_tp is not None:
        out.append(Problem(f"{where}.tp", *bad_tp))
    out += _remote_code_problems(inst, where, entry)
    if inst.engine.max_model_len > entry.max_context:
        out.append(
            Problem(
                f"{where}.engine.max_model_len",
                f"{inst.engine.max_model_len} tokens exceeds max_context {entry.max_context} "
                f"of model {entry.name!r}",
                f"use at most {entry.max_context}, or raise max_context in the models file",
            )
        )
    return out


def kv_tokens(inst: Instance, cluster: Cluster, models: Models) -> int:
    """Tokens the instance's KV cache holds (its recorded `memory_gib.kv`, read back from the
    3 decimals the plan keeps)."""
    rec = inst.model_copy(
        update={
            "memory_gib": inst.memory_gib.model_copy(
                update={"kv": inst.memory_gib.kv + _KV_ROUND_GIB}
            )
        }
    )
    return perf_for_instance(rec, cluster, models).max_kv_tokens


def _startable_problems(
    inst: Instance, where: str, cluster: Cluster, models: Models
) -> list[Problem]:
    """vLLM refuses to start an engine whose KV cache cannot hold one `max_model_len` sequence
    (the rule the optimizer's candidates and the baselines follow: `InstancePerf.fits`)."""
    mml = inst.engine.max_model_len
    tokens = kv_tokens(inst, cluster, models)
    if tokens >= mml:
        return []
    return [
        Problem(
            f"{where}.memory_gib.kv",
            f"instance {inst.id!r}: its KV cache ({inst.memory_gib.kv:.3f} GiB per GPU) holds "
            f"{tokens} tokens, less than one max_model_len sequence ({mml}); vLLM would not "
            "start it",
            f"lower engine.max_model_len to at most {tokens}, give it more KV memory, or "
            "re-run `planner optimize`",
        )
    ]


@dataclass
class GpuUsage:
    """What the instances of one point ask of one device."""

    name: str
    memory_gib: float
    arch: str
    ids: list[str] = field(default_factory=list)  # instances on it
    awake_gib: float = 0.0  # gpu-tier instances, GiB
    awake_util: float = 0.0  # their gpu_memory_utilization budgets, share of the device
    sleepers: list[tuple[float, float, float]] = field(default_factory=list)  # GiB, util, ctx GiB

    def need(self) -> tuple[float, float]:
        """(GiB, share of the device) the invariant asks of this GPU."""
        if not self.sleepers:
            return self.awake_gib, self.awake_util
        s = sorted(self.sleepers, reverse=True)
        ctx = sum(c for _, _, c in s[1:])  # the other sleepers keep their contexts, GiB
        top_util = max(u for _, u, _ in s)  # the sleeper awake now: any of them
        return (
            self.awake_gib + s[0][0] + ctx,
            self.awake_util + top_util + ctx / self.memory_gib,
        )


def gpu_usage(
    point: Point, cluster: Cluster, models: Models | None = None
) -> tuple[dict[tuple[str, int], GpuUsage], dict[str, float]]:
    """Per GPU: awake memory, budgets and sleepers; per node: host RAM asked, GiB.

    Without `models`, the plan's recorded memory alone (the optimizer's own points); with
    them, weights are at least what the perf model gives (module docstring). GPUs the
    cluster lacks are left out (`plan_problems` names them first).
    """
    gpus = {
        (n.name, d): GpuUsage(g.spec.name, g.spec.memory_gib, g.spec.arch)
        for n in cluster.nodes
        for d, g in n.gpu_list()
    }
    ram: dict[str, float] = {}
    for inst in point.instances:
        mem = inst.memory_gib
        if models is not None:
            perf = perf_for_instance(inst, cluster, models)
            weights = max(mem.weights, perf.weights_gib_per_gpu)  # per GPU, GiB
            ctx = perf.context_gib_per_gpu  # what a sleeping process keeps per GPU, GiB
        else:
            first = gpus.get((inst.node, inst.gpus[0])) if inst.gpus else None
            weights = mem.weights
            ctx = default_calib(first.arch).context_gib if first else 0.0
        awake = weights + mem.kv + mem.overhead  # per GPU when awake, GiB
        util = inst.engine.gpu_memory_utilization
        for g in inst.gpus:
            acc = gpus.get((inst.node, g))
            if acc is None:
                continue
            acc.ids.append(inst.id)
            if inst.tier == "gpu":
                acc.awake_gib += awake
                acc.awake_util += util
            else:
                acc.sleepers.append((awake, util, ctx))
        host_gib = inst.kv_cpu_offload_gib + inst.expert_cpu_offload_gib
        if inst.tier == "host":
            host_gib += weights * inst.tp  # weights of every rank while asleep, GiB
        ram[inst.node] = ram.get(inst.node, 0.0) + host_gib
    return gpus, ram


def _budget_problems(point: Point, where: str, gpus: dict) -> tuple[list[Problem], list[Problem]]:
    """(per instance, per GPU): each engine's gpu_memory_utilization budget holds its
    instance; the budgets of instances awake together fit the device."""
    out: list[Problem] = []
    for ii, inst in enumerate(point.instances):
        g = gpus[(inst.node, inst.gpus[0])]
        budget = inst.engine.gpu_memory_utilization * g.memory_gib  # GiB vLLM may use
        if g.arch != "cpu" and budget + _GIB_TOL < inst.memory_gib.total:
            out.append(
                Problem(
                    f"{where}.instances[{ii}].engine.gpu_memory_utilization",
                    f"{inst.engine.gpu_memory_utilization} of a {g.memory_gib:g} GiB {g.name} is "
                    f"{budget:.2f} GiB, less than the {inst.memory_gib.total:.2f} GiB the "
                    f"instance {inst.id!r} needs (memory_gib)",
                    "raise gpu_memory_utilization, or re-run `planner optimize`",
                )
            )
    per_gpu: list[Problem] = []
    for (node, dev), g in sorted(gpus.items()):
        util = g.need()[1]
        if g.ids and g.arch != "cpu" and util > 1 + _UTIL_TOL:
            per_gpu.append(
                Problem(
                    f"{where}.instances",
                    f"GPU {node}:{dev} ({g.name}) with {', '.join(g.ids)}: the "
                    "gpu_memory_utilization budgets of instances awake together add up to "
                    f"{util:.2f} of the device; vLLM cannot start the last of them",
                    "lower gpu_memory_utilization so they sum to at most 1, or re-run "
                    "`planner optimize`",
                )
            )
    return out, per_gpu


def _memory_problems(
    where: str,
    cluster: Cluster,
    gpus: dict,
    ram: dict[str, float],
    gpu_margin: float = 0.0,
    host_margin: float = 0.0,
) -> list[Problem]:
    """GPUs and nodes where the point does not fit (each keeping a margin free)."""
    out: list[Problem] = []
    for (node, dev), g in sorted(gpus.items()):
        gib = g.need()[0]
        cap = g.memory_gib * (1 - gpu_margin)
        if g.ids and gib > cap + _GIB_TOL:
            out.append(
                Problem(
                    f"{where}.instances",
                    f"GPU {node}:{dev} ({g.name}, {cap:.2f} GiB) with {', '.join(g.ids)} needs "
                    f"{gib:.2f} GiB awake (always-awake instances + the largest sleeper + the "
                    "other sleepers' contexts): it does not fit",
                    "move an instance to another GPU, put one to sleep (tier host/disk), or "
                    "re-run `planner optimize`",
                )
            )
    for n in cluster.nodes:
        cap = n.cpu_memory_gib * (1 - host_margin)
        if ram.get(n.name, 0.0) > cap + _GIB_TOL:
            out.append(
                Problem(
                    f"{where}.instances",
                    f"node {n.name} needs {ram[n.name]:.1f} GiB of RAM for sleeping weights "
                    f"and CPU offload, more than its {cap:.1f} GiB",
                    "use tier disk for some sleepers, or re-run `planner optimize`",
                )
            )
    return out


def plan_problems(plan: Plan, cluster: Cluster, models: Models) -> list[Problem]:
    """Every problem of every point; empty when the plan can be applied as it is."""
    out: list[Problem] = []
    for pi, point in enumerate(plan.points):
        where = f"points[{pi}]"
        mine: list[Problem] = []
        for ii, inst in enumerate(point.instances):
            mine += _instance_problems(inst, f"{where}.instances[{ii}]", cluster, models)
        served = {i.model for i in point.instances}
        for name in models.names:
            if name not in served:
                mine.append(
                    Problem(
                        f"{where}.instances",
                        f"point {point.name!r} has no instance of model {name!r}",
                        "re-run `planner optimize` with this models file, or remove the model "
                        "from it",
                    )
                )
        if not any(p.path.startswith(f"{where}.instances[") for p in mine):
            gpus, ram = gpu_usage(point, cluster, models)
            engines, shares = _budget_problems(point, where, gpus)
            mine += engines + _memory_problems(where, cluster, gpus, ram) + shares
            for ii, inst in enumerate(point.instances):
                mine += _startable_problems(inst, f"{where}.instances[{ii}]", cluster, models)
        out += mine
    return out


def check_plan(plan: Plan, cluster: Cluster, models: Models, file: str = "<plan>") -> None:
    """Raise InputError for the first problem of `plan_problems` (with the count of the rest)."""
    found = plan_problems(plan, cluster, models)
    if found:
        p = found[0]
        more = f" (and {len(found) - 1} more problem(s))" if len(found) > 1 else ""
        raise InputError(p.message + more, file=file, path=p.path, fix=p.fix)


def memory_violations(
    point: Point,
    cluster: Cluster,
    models: Models | None = None,
    *,
    gpu_margin: float = 0.0,
    host_margin: float = 0.0,
) -> list[str]:
    """Every GPU and node where the point does not fit (a margin kept free); empty when it does.

    The optimizer's check of its own points (recorded memory: no `models`); `plan_problems`
    runs it with the models, after the per-instance checks and the engine budgets.
    """
    gpus, ram = gpu_usage(point, cluster, models)
    missing = [
        f"{i.id}: GPU {i.node}:{g} does not exist"
        for i in point.instances
        for g in i.gpus
        if (i.node, g) not in gpus
    ]
    return missing + [
        p.message for p in _memory_problems("", cluster, gpus, ram, gpu_margin, host_margin)
    ]


__all__ = [
    "GpuUsage",
    "Problem",
    "check_plan",
    "gpu_usage",
    "kv_tokens",
    "memory_violations",
    "plan_problems",
]
