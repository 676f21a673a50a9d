"""The `plan show` service: what a plan point puts on each GPU (awake weights, KV and other
GiB, the room kept to wake a sleeper, who is there, the memory over the day), the ladder of
points seen from it, and which of its figures a calibration moved."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.schemas.plan import Hop, Plan, Point

# per figure: calibrated or not, and from which runs (`calib.figure_sources`)
FigureSources = dict[str, dict[str, object]]


@dataclass
class GpuInstance:
    """An instance on a GPU: its tier, TP and awake hours (UTC)."""

    id: str
    tier: str
    tp: int
    awake_hours: list[int]


@dataclass
class GpuRow:
    """One GPU a point uses, GiB: awake weights/KV/other, the sleeping slot (the largest
    footprint of a host/disk instance there: what must stay free to wake it), the GPU's
    memory (None: unknown), who is there, and the memory planned awake over the day."""

    node: str
    gpu: int
    gpu_type: str | None
    weights_gib: float = 0.0
    kv_gib: float = 0.0
    other_gib: float = 0.0
    sleeping_gib: float = 0.0
    capacity_gib: float | None = None
    instances: list[GpuInstance] = field(default_factory=list)
    peak_gib: float = 0.0
    peak_hours: list[int] = field(default_factory=list)
    on_demand_gib: float = 0.0
    at_hour_gib: float | None = None  # with an hour asked for: the memory planned then
    awake_at_hour: list[str] | None = None  # and who is awake

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        if self.at_hour_gib is None:
            del out["at_hour_gib"], out["awake_at_hour"]
        return out


@dataclass(frozen=True)
class LadderRow:
    """A point of the plan seen from another: its figures and the hop to it (None: the
    point itself, or no hop recorded); `rung`: it shares the placement (sleeps and wakes)."""

    point: str
    selected: bool
    warm_gpu_gib: float
    switch_p95_s: float
    slo_attainment: float
    rung: bool
    for_traffic_share: float | None  # a quiet rung's share of the fitted traffic
    hop: Hop | None

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["hop"] = None if self.hop is None else self.hop.model_dump()
        return out


@dataclass(frozen=True)
class PlanView:
    """What `plan show` shows of one point of a plan."""

    path: Path
    plan: Plan
    point: Point
    hour: int | None
    gpus: list[GpuRow]
    ladder: list[LadderRow]
    calibration: dict[str, FigureSources]  # "model on GPU type" -> its figures' sources

    def to_json(self) -> dict[str, object]:
        from planner.optimizer.daymemory import idle_sleep_rule

        p = self.point
        return {
            "plan": str(self.path),
            "point": p.name,
            "predicted": p.predicted,
            "predicted_fit": p.predicted_fit,
            "held_days": self.plan.search.get("held_days", []),
            "idle_sleep": idle_sleep_rule(p),
            "hour": self.hour,
            "gpus": [g.to_json() for g in self.gpus],
            "ladder": [r.to_json() for r in self.ladder],
            "calibration": self.calibration,
        }


def show(plan_path: Path, point: str | None = None, hour: int | None = None) -> PlanView:
    """Point `point` (default: the selected one) of the plan at `plan_path`; with `hour`,
    what is planned at that UTC hour too."""
    from planner.app.inputs import check_point

    plan = _load(plan_path)
    check_point(plan, point, plan_path)
    p = plan.point(point)
    gpus = gpu_rows(p, _capacities(plan, plan_path), hour)
    return PlanView(
        plan_path, plan, p, hour, gpus, ladder_rows(plan, p), calibration_sources(plan, p)
    )


def ladder_rows(plan: Plan, point: Point) -> list[LadderRow]:
    """Every point of the plan, leanest first, with the hop from `point` to it (the plan's
    `hops`): restarts, their seconds and the GiB they load, wakes and sleeps."""
    hops = plan.hops.get(point.name, {})
    rows = []
    for q in sorted(plan.points, key=lambda q: (q.predicted.warm_gpu_gib, q.name)):
        h = hops.get(q.name)
        rows.append(
            LadderRow(
                point=q.name,
                selected=q.name == plan.selected,
                warm_gpu_gib=q.predicted.warm_gpu_gib,
                switch_p95_s=q.predicted.switch_p95_s,
                slo_attainment=q.predicted.slo_attainment,
                rung=q.name == point.name or (h is not None and h.restarts == 0),
                for_traffic_share=q.for_traffic_share,
                hop=h,
            )
        )
    return rows


def gpu_rows(
    point: Point, capacity_gib: dict[tuple[str, int], float], hour: int | None = None
) -> list[GpuRow]:
    """One row per GPU the point uses (`GpuRow`), sorted by node and device, with the memory
    over the day (`optimizer.daymemory`)."""
    from planner.optimizer.daymemory import day_memory

    days = {(d.node, d.gpu): d for d in day_memory(point)}
    rows: dict[tuple[str, int], GpuRow] = {}
    for inst in point.instances:
        for g in inst.gpus:
            r = rows.setdefault(
                (inst.node, g),
                GpuRow(inst.node, g, inst.gpu_type, capacity_gib=capacity_gib.get((inst.node, g))),
            )
            m = inst.memory_gib
            if inst.tier == "gpu":
                r.weights_gib += m.weights
                r.kv_gib += m.kv
                r.other_gib += m.overhead
            else:
                r.sleeping_gib = max(r.sleeping_gib, m.total)
            r.instances.append(GpuInstance(inst.id, inst.tier, inst.tp, inst.awake_hours))
    out = [rows[k] for k in sorted(rows)]
    for r in out:
        r.weights_gib = round(r.weights_gib, 3)
        r.kv_gib = round(r.kv_gib, 3)
        r.other_gib = round(r.other_gib, 3)
        r.sleeping_gib = round(r.sleeping_gib, 3)
        d = days[(r.node, r.gpu)]
        r.peak_gib, r.peak_hours = d.peak_gib, d.peak_hours
        r.on_demand_gib = d.on_demand_gib
        if hour is not None:
            r.at_hour_gib, r.awake_at_hour = d.by_hour_gib[hour], list(d.awake_by_hour[hour])
    return out


def _load(plan_path: Path) -> Plan:
    """The plan; GPU types filled from the recorded cluster file when the plan predates them."""
    from planner.planfile import annotate
    from planner.schemas import load_cluster, load_plan

    plan = load_plan(plan_path)
    if all(i.gpu_type for p in plan.points for i in p.instances):
        return plan
    cluster_file = _recorded(plan, plan_path, "cluster")
    return annotate(plan, load_cluster(cluster_file)) if cluster_file else plan


def _recorded(plan: Plan, plan_path: Path, kind: str) -> Path | None:
    """An input recorded in plan.inputs, found as `planner apply` finds it."""
    from planner.app.inputs import recorded_path

    try:
        return recorded_path(plan_path, plan, kind)
    except InputError:  # `plan show` reads the plan alone when its inputs moved
        return None


def _capacities(plan: Plan, plan_path: Path) -> dict[tuple[str, int], float]:
    """(node, device) -> GiB of the GPU, from the recorded cluster file or the GPU catalog."""
    from planner.catalog.gpus import resolve_gpu
    from planner.errors import PlannerError
    from planner.schemas import load_cluster

    cluster_file = _recorded(plan, plan_path, "cluster")
    if cluster_file is not None:
        try:
            cl = load_cluster(cluster_file)
            return {(n.name, i): g.spec.memory_gib for n in cl.nodes for i, g in n.gpu_list()}
        except PlannerError:
            pass  # changed since: fall back to the catalog by type
    out: dict[tuple[str, int], float] = {}
    for p in plan.points:
        for inst in p.instances:
            if inst.gpu_type is None:
                continue
            try:
                gib = resolve_gpu(inst.gpu_type).memory_gib
            except ValueError:
                continue
            out |= {(inst.node, g): gib for g in inst.gpus}
    return out


def calibration_sources(plan: Plan, point: Point) -> dict[str, FigureSources]:
    """ "model on GPU type" -> per figure, whether the plan's calibration moved it and from
    which runs (`calib.figure_sources`; the plan records each GPU type's calibration)."""
    from planner.optimizer.perf.calib import figure_sources

    out: dict[str, FigureSources] = {}
    for i in point.instances:
        ref = plan.calibration.get(i.gpu_type or "")
        key = f"{i.model} on {i.gpu_type}"
        if key not in out:
            out[key] = (
                figure_sources(ref.fields, ref.source, ref.runs, ref.models.get(i.model))
                if ref is not None
                else figure_sources([], "", [], None)
            )
    return out
