r"""Placement MILP: which candidates run on which GPU sets, in which tier.

Sets
    M                 models;  C_m  candidates of model m (variant, GPU type, TP, KV level)
    S                 GPU sets (aligned TP groups of one type on one node);  J  GPUs;  N  nodes
    T = {gpu, host, disk}  tiers;  T_s = {host, disk} sleeping tiers
    P = {(c, s, t) : type(s) = type(c), |s| = tp(c), t allowed for model(c),
                      s on model(c)'s pinned node / GPU type if models.yaml pins it} placements,
                      less those another of the same model, set and tier dominates (no worse
                      in any parameter below, better in one: `undominated`; the optimum stays)
    P_m, P_j, P_n     placements of model m / covering GPU j / on node n;  P_mj = P_m ∩ P_j

Parameters (per placement p = (c, s, t))
    a_p   awake memory per GPU, GiB          k_p  memory a sleeping process keeps per GPU, GiB
    h_p   host RAM while asleep, GiB (t = host: all weights; else 0)
    cap_p requests/s at the TPOT target      q_p  quality penalty of the variant x model share
    d_p   expected switch delay, s/h = switch-ins/h of model(c) x wake time of tier t (0 if gpu)
    U_j   usable memory of GPU j, GiB        R_n  usable RAM of node n, GiB
    D_m   peak-hour demand of m, requests/s; H headroom;  K max replicas of a model

Variables
    x_p in {0,1}   placement p is used
    z_j >= 0       swap slot of GPU j: memory reserved for whichever sleeper is awake, GiB
    y_j in {0,1}   GPU j holds anything

Objective
    min  w_s sum_p d_p x_p
       + w_m ( sum_{p: t=gpu} tp_p a_p x_p + sum_{p: t in T_s} tp_p k_p x_p + sum_j z_j )
       + w_q sum_p q_p x_p + w_g sum_j y_j

Constraints
    (1) every model served          sum_{p in P_m} x_p >= 1                       for m in M
    (2) capacity                    sum_{p in P_m} cap_p x_p + u_m >= H D_m       for m in M
        (u_m >= 0 demand left unserved, priced W_UNSERVED per request/s in the objective: a
        trace beyond the cluster still gets the placement that serves the most of it)
    (3) at most K replicas          sum_{p in P_m} x_p <= K                       for m in M
    (4) swap slot holds a sleeper   z_j >= sum_{p in P_mj, t in T_s} a_p x_p     for m in M, j in J
        (by (8) at most one term is nonzero: z_j >= a_p x_p for every sleeper p on j, and the
        sum gives the LP relaxation a slot of the model's full size however its x_p are split)
    (5) GPU memory (docs/plan-format.md)
                                    sum_{p in P_j, t=gpu} a_p x_p + sum_{p in P_j, t in T_s} k_p x_p
                                      + z_j <= U_j y_j                              for j in J
    (6) host RAM for sleepers       sum_{p in P_n, t=host} h_p x_p <= R_n          for n in N
    (7) symmetry: identical GPUs    y_j >= y_{j+1}      for consecutive GPUs j, j+1 of one group
        fill in order                 (aligned TP sets make every placement permutable to a prefix)
    (8) one sleeper of a model      sum_{p in P_mj, t in T_s} x_p <= y_j            for m in M, j in J
        per GPU, on a GPU in use      (two would share the swap slot, so only one could ever be
                                      awake: the second would count capacity it never serves.
                                      y_j, not 1: (5) makes y_j = 1 under a sleeper anyway, and
                                      the LP can no longer spread sleepers over GPUs in use a
                                      fraction (lab16, all asleep: 218 B&B nodes -> the root))

(5) is the invariant every plan point must satisfy: the always-awake instances plus the largest
sleeper fit each GPU, with the sleeping processes' CUDA contexts counted.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pulp

from planner.optimizer.candidates import Candidate, GpuSet
from planner.optimizer.demand import ModelDemand
from planner.optimizer.solver import run_solver, solver_work

TIERS = ("gpu", "host", "disk")
W_UNSERVED = 1e4  # objective cost of one request/s of peak demand left without capacity


@dataclass(frozen=True)
class Placement:
    """One chosen (candidate, GPU set, tier)."""

    cand: Candidate
    gset: GpuSet
    tier: str


@dataclass(frozen=True)
class MilpResult:
    """What a solve returns."""

    status: str  # "optimal", "feasible" (node or time limit hit with an incumbent), "infeasible"
    objective: float
    placements: tuple[Placement, ...]
    solve_s: float  # solver wall time as reported by PuLP, s
    n_vars: int
    nodes: int = 0  # branch-and-bound nodes (HiGHS; 0 for CBC)
    lp_iterations: int = 0  # simplex iterations, heuristics' and strong branching's included
    unserved: tuple[str, ...] = ()  # models with no placement option at all
    slack: dict[str, float] = field(
        default_factory=dict
    )  # constraint name -> slack at the solution


@dataclass(frozen=True)
class MilpInput:
    """Everything one solve needs, so that the same input gives the same model."""

    candidates: tuple[Candidate, ...]
    sets: tuple[GpuSet, ...]
    demand: dict[str, ModelDemand]
    models: tuple[str, ...]
    gpu_usable_gib: dict[tuple[str, int], float]  # (node, device) -> usable GiB
    gpu_groups: tuple[tuple[tuple[str, int], ...], ...]  # devices of one type on one node, in order
    node_ram_gib: dict[str, float]  # node -> usable RAM for sleepers, GiB
    headroom: float
    max_replicas: int
    may_sleep: frozenset[str]
    w_switch: float
    w_memory: float
    w_quality: float
    w_gpus: float
    pins: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    # model -> (node, GPU type) it is pinned to (models.yaml `pin:`; None: any)


def placement_options(inp: MilpInput) -> list[Placement]:
    """Every (candidate, set, tier) the MILP may choose, in a deterministic order."""
    by_type: dict[tuple[str, int], list[GpuSet]] = {}
    for s in inp.sets:
        by_type.setdefault((s.gpu_type, len(s.gpus)), []).append(s)
    out = []
    for c in sorted(inp.candidates, key=lambda c: c.key):
        node, gpu_type = inp.pins.get(c.model, (None, None))
        for s in by_type.get((c.gpu_type, c.tp), []):
            if node not in (None, s.node) or gpu_type not in (None, s.gpu_type):
                continue
            tiers = TIERS if c.model in inp.may_sleep else ("gpu",)
            for t in tiers:
                out.append(Placement(c, s, t))
    return out


def switch_delay_s_per_h(p: Placement, demand: dict[str, ModelDemand]) -> float:
    """Expected switch delay a placement adds, s per hour of trace."""
    if p.tier == "gpu":
        return 0.0
    d = demand.get(p.cand.model)
    if d is None:
        return 0.0
    return d.switch_ins_per_hour * p.cand.perf.wake_s(p.tier)


def solve(
    inp: MilpInput,
    *,
    time_limit_s: float = 10.0,
    max_nodes: int | None = None,
    solver: str = "auto",
    forbid: frozenset[tuple[str, str, str, str]] = frozenset(),
    gap_rel: float = 0.0,
) -> MilpResult:
    """Build and solve the MILP of the module docstring.

    `max_nodes` stops branch and bound with the best plan found so far: a limit on work, so
    the same input gives the same plan on any machine (the time limit is a backstop).
    `forbid` removes options by (model, variant, GPU type, tier): `explain` re-solves without
    a model's chosen option to price the next-best one.
    """
    opts = [
        p
        for p in placement_options(inp)
        if (p.cand.model, p.cand.variant, p.cand.gpu_type, p.tier) not in forbid
    ]
    opts = undominated(opts)
    served = {p.cand.model for p in opts}
    unserved = tuple(m for m in inp.models if m not in served)
    if unserved:
        return MilpResult("infeasible", float("inf"), (), 0.0, 0, unserved=unserved)
    prob, x = build_problem(inp, opts)
    status, objective = run_solver(prob, time_limit_s, solver, gap_rel, max_nodes)
    work = solver_work(prob)
    if status == "infeasible":
        return MilpResult("infeasible", float("inf"), (), prob.solutionTime or 0.0, len(x), *work)
    chosen = tuple(opts[i] for i in range(len(opts)) if (x[i].value() or 0) > 0.5)
    slack = {c.name: _slack(c) for c in prob.constraints() if not c.name.startswith("c4_")}
    t = prob.solutionTime or 0.0
    return MilpResult(status, objective, chosen, t, len(x), *work, slack=slack)


def build_problem(inp: MilpInput, opts: list[Placement]) -> tuple[pulp.LpProblem, list]:
    """The MILP over these placement options, unsolved, and its x_p in `opts`' order."""
    prob = pulp.LpProblem("placement", pulp.LpMinimize)
    x = [prob.add_variable(f"x{i}", cat="Binary") for i in range(len(opts))]
    gpus = sorted(inp.gpu_usable_gib)
    gidx = {g: k for k, g in enumerate(gpus)}
    z = [prob.add_variable(f"z{k}", lowBound=0) for k in range(len(gpus))]
    y = [prob.add_variable(f"y{k}", cat="Binary") for k in range(len(gpus))]

    by_model: dict[str, list[int]] = {m: [] for m in inp.models}
    by_gpu: dict[int, list[int]] = {k: [] for k in range(len(gpus))}
    by_node_host: dict[str, list[int]] = {}
    for i, p in enumerate(opts):
        by_model[p.cand.model].append(i)
        for g in p.gset.gpus:
            by_gpu[gidx[(p.gset.node, g)]].append(i)
        if p.tier == "host":
            by_node_host.setdefault(p.gset.node, []).append(i)

    # The rows go in this order (the solver's answer may depend on it).
    prob += _objective(inp, opts, x, z, y)
    _model_rows(prob, inp, opts, x, by_model)
    for k, g in enumerate(gpus):
        _gpu_rows(prob, inp, opts, x, k, z[k], y[k], inp.gpu_usable_gib[g], by_gpu[k])
    for n, ids in sorted(by_node_host.items()):
        # (6) host RAM holds the weights of every host-tier sleeper on the node
        prob += (
            (
                pulp.lpSum(opts[i].cand.perf.weights_host_gib * x[i] for i in ids)
                <= inp.node_ram_gib.get(n, 0.0)
            ),
            f"c6_ram_{n}",
        )

    for group in inp.gpu_groups:
        for a, b in itertools.pairwise(group):
            # (7) identical GPUs are used in order
            prob += y[gidx[a]] >= y[gidx[b]], f"c7_order_{a[0]}_{a[1]}_{b[1]}"
    return prob, x


def _warm_gib(p: Placement) -> float:
    """GiB the placement holds warm over all its GPUs: awake (gpu tier) or its contexts."""
    per_gpu = p.cand.perf.awake_gib_per_gpu if p.tier == "gpu" else p.cand.perf.context_gib_per_gpu
    return per_gpu * p.cand.tp


def _objective(inp: MilpInput, opts: list[Placement], x: list, z: list, y: list) -> Any:
    """Weighted switch delay, warm memory (with the swap slots), quality and GPUs used."""
    total_share = sum(d.share for d in inp.demand.values()) or 1.0
    return (
        inp.w_switch
        * pulp.lpSum(switch_delay_s_per_h(p, inp.demand) * x[i] for i, p in enumerate(opts))
        + inp.w_memory
        * (pulp.lpSum(_warm_gib(p) * x[i] for i, p in enumerate(opts)) + pulp.lpSum(z))
        + inp.w_quality
        * pulp.lpSum(
            p.cand.quality_penalty
            * (inp.demand[p.cand.model].share / total_share if p.cand.model in inp.demand else 0.0)
            * x[i]
            for i, p in enumerate(opts)
        )
        + inp.w_gpus * pulp.lpSum(y)
    )


def _model_rows(
    prob: Any, inp: MilpInput, opts: list[Placement], x: list, by_model: dict[str, list[int]]
) -> None:
    """Per model: served (1), capacity for its peak less a penalised shortfall (2), at most
    `max_replicas` (3). Constraint names use indices: PuLP rewrites characters such as '-'."""
    for mi, m in enumerate(inp.models):
        ids = by_model[m]
        # (1) every model served
        prob += pulp.lpSum(x[i] for i in ids) >= 1, f"c1_served_{mi}"
        d = inp.demand.get(m)
        if d is not None and d.peak_rps > 0:
            # (2) capacity >= headroom x peak-hour demand, less what is left unserved
            u = prob.add_variable(f"u{mi}", lowBound=0)
            prob.objective += W_UNSERVED * u
            prob += (
                pulp.lpSum(opts[i].cand.capacity_rps * x[i] for i in ids) + u
                >= inp.headroom * d.peak_rps,
                f"c2_capacity_{mi}",
            )
        # (3) at most K replicas
        prob += pulp.lpSum(x[i] for i in ids) <= inp.max_replicas, f"c3_replicas_{mi}"


def _gpu_rows(
    prob: Any,
    inp: MilpInput,
    opts: list[Placement],
    x: list,
    k: int,
    slot: Any,
    used: Any,
    usable_gib: float,
    on_gpu: list[int],
) -> None:
    """GPU k: its swap `slot` holds the largest sleeper (4), one sleeper per model and only
    when `used` (8), and its memory fits the `usable_gib` when used (5)."""
    sleepers = [i for i in on_gpu if opts[i].tier != "gpu"]
    per_model: dict[str, list[int]] = {}
    for i in sleepers:
        per_model.setdefault(opts[i].cand.model, []).append(i)
    for mi, m in enumerate(inp.models):
        ids = per_model.get(m)
        if not ids:
            continue
        # (4) the swap slot holds the largest sleeper (one term per model is nonzero: (8))
        prob += (
            slot >= pulp.lpSum(opts[i].cand.perf.awake_gib_per_gpu * x[i] for i in ids),
            f"c4_slot_{k}_{mi}",
        )
        # (8) at most one sleeper of a model on a GPU, and only on a GPU in use
        prob += pulp.lpSum(x[i] for i in ids) <= used, f"c8_one_sleeper_{k}_{mi}"
    # (5) GPU memory: awake instances + sleeping contexts + swap slot fit the device
    prob += (
        (
            pulp.lpSum(
                opts[i].cand.perf.awake_gib_per_gpu * x[i] for i in on_gpu if opts[i].tier == "gpu"
            )
            + pulp.lpSum(opts[i].cand.perf.context_gib_per_gpu * x[i] for i in sleepers)
            + slot
            <= usable_gib * used
        ),
        f"c5_memory_{k}",
    )


def _seen_by_milp(p: Placement) -> tuple[float, ...]:
    """What the MILP sees of a placement, each entry the lower the better: awake GiB per GPU,
    -capacity, quality penalty; for a sleeper also its context GiB, wake time and host RAM."""
    perf = p.cand.perf
    v = (perf.awake_gib_per_gpu, -p.cand.capacity_rps, p.cand.quality_penalty)
    if p.tier == "gpu":
        return v
    host_gib = perf.weights_host_gib if p.tier == "host" else 0.0
    return (*v, perf.context_gib_per_gpu, perf.wake_s(p.tier), host_gib)


def undominated(opts: list[Placement]) -> list[Placement]:
    """`opts` less each placement that another of the same model, set and tier dominates (no
    worse in anything the MILP sees, better in one; of equals, the first by candidate key
    stays). Swapping a dominated placement for its dominator keeps every constraint and
    lowers no term of the objective, so the optimum is unchanged; e.g. a KV level that adds
    memory but no capacity (the batch cap binds) is never needed. Order kept."""
    groups: dict[tuple, list[tuple[Placement, tuple[float, ...]]]] = {}
    for p in opts:
        key = (p.cand.model, p.gset.node, p.gset.gpus, p.tier)
        groups.setdefault(key, []).append((p, _seen_by_milp(p)))

    def dominated(p: Placement, vp: tuple[float, ...], group) -> bool:
        return any(
            o is not p
            and all(a <= b for a, b in zip(vo, vp, strict=True))
            and (vo != vp or o.cand.key < p.cand.key)
            for o, vo in group
        )

    keep = {id(p) for group in groups.values() for p, vp in group if not dominated(p, vp, group)}
    return [p for p in opts if id(p) in keep]


def _slack(c: pulp.LpConstraint) -> float:
    """How far a constraint is from binding at the solution (>= 0 when satisfied)."""
    v = c.value() or 0.0  # lhs - rhs, as PuLP stores constraints as expr <sense> 0
    return -v if c.sense == pulp.LpConstraintLE else v
