"""One resolver for a plan's recorded inputs, used by apply, evaluate, explain, gateway and
adjust: each input is the flag when given, else the path the plan records (relative to the
plan's folder, as `optimize` stores it, else as written); a recorded input that cannot be
found is an error naming the field and the flag, never silently dropped. The plan is checked
against the cluster and models (`invariants.check_plan`) before any command acts on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.optimizer.perf import Calib, InstancePerf
    from planner.schemas.cluster import Cluster
    from planner.schemas.models import Models
    from planner.schemas.plan import CalibrationRef, Plan, Point
    from planner.schemas.slo import Slo


def recorded_path(plan_path: Path, plan: Plan, key: str) -> Path | None:
    """The file or folder `plan.inputs[key]` names; None when the plan records none."""
    ref = plan.inputs.get(key)
    if ref is None or not ref.path:
        return None
    p = Path(ref.path).expanduser()
    for cand in (plan_path.parent / p, p):
        if cand.exists():
            return cand
    raise InputError(
        f"the {key} {'folder' if key == 'profiles' else 'file'} the plan records ({ref.path})"
        " is not found",
        file=str(plan_path),
        path=f"inputs.{key}.path",
        fix=f"pass --{key} {'FOLDER' if key == 'profiles' else 'FILE'}",
    )


def calibration(profiles: Path | None) -> tuple[dict[str, Calib], list[str]]:
    """(GPU type -> Calib fitted in the profiles under `profiles`, warnings about them)."""
    if profiles is None:
        return {}, []
    if not profiles.exists():
        raise InputError(
            "no such profile folder or file",
            file=str(profiles),
            fix="pass the folder `planner profile` wrote",
        )
    from planner.optimizer.perf import calib_from_profile
    from planner.profiler.store import load_profiles, warnings_here

    found = load_profiles([profiles])
    return {p.gpu_type: calib_from_profile(p) for p in found}, list(warnings_here(found))


def calibration_refs(profiles: Path | None) -> dict[str, CalibrationRef]:
    """GPU type -> CalibrationRef: the runs each GPU type's factors in `calibration` were
    fitted from (the same profile per GPU type: the last one found)."""
    if profiles is None or not profiles.exists():
        return {}
    from planner.optimizer.perf.calib import calibrated_fields
    from planner.profiler.store import load_profiles
    from planner.schemas.plan import CalibrationRef

    return {
        p.gpu_type: CalibrationRef(
            node=p.node,
            source=p.calibration.source,
            runs=list(p.calibration.runs),
            fields=calibrated_fields(p.calibration),
            models={m.model: dict(m.factors) for m in p.calibration.models},
        )
        for p in load_profiles([profiles])
    }


@dataclass
class PlanInputs:
    """A plan and the inputs it was optimized on, checked against each other."""

    plan: Plan
    plan_path: Path
    cluster: Cluster
    cluster_path: Path
    models: Models
    models_path: Path
    slo: Slo | None = None  # None where the command needs none and the plan records none
    slo_path: Path | None = None
    profiles_path: Path | None = None
    calib: dict[str, Calib] = field(default_factory=dict)  # GPU type -> Calib (empty: spec sheet)
    warnings: list[str] = field(default_factory=list)

    def perfs(self, point: Point) -> dict[str, InstancePerf]:
        """Instance id -> InstancePerf of one point, with the plan's calibration."""
        from planner.optimizer.sim.perfs import perfs_for_point

        return perfs_for_point(point, self.cluster, self.models, self.calib)

    def all_perfs(self) -> dict[str, dict[str, InstancePerf]]:
        """Point name -> instance id -> InstancePerf, for every point of the plan."""
        return {p.name: self.perfs(p) for p in self.plan.points}

    def needed_slo(self) -> Slo:
        """The SLO, for commands that resolve their inputs with `need_slo` (InputError where
        it is missing all the same)."""
        if self.slo is None:
            raise InputError("this command needs the SLO file", path="--slo", fix="pass --slo FILE")
        return self.slo

    def seed(self) -> int:
        """The plan's search seed (0 when it records none)."""
        return int(self.plan.search.get("seed", 0))


def check_point(plan: Plan, point: str | None, plan_path: Path) -> None:
    """InputError naming the plan's points when `--point` names none of them (None: the
    selected point, always there)."""
    names = [p.name for p in plan.points]
    if point is not None and point not in names:
        raise InputError(
            f"no point {point!r} in the plan",
            file=str(plan_path),
            path="--point",
            fix=f"use one of {names}",
        )


def resolve(
    plan_path: Path,
    *,
    cluster: Path | None = None,
    models: Path | None = None,
    slo: Path | None = None,
    profiles: Path | None = None,
    point: str | None = None,
    need_slo: bool = False,
) -> PlanInputs:
    """The plan at `plan_path` and its inputs (flags first, then what the plan records)."""
    from planner.optimizer.invariants import check_plan
    from planner.schemas import load_cluster, load_models, load_plan, load_slo

    plan_path = Path(plan_path)
    plan = load_plan(plan_path)
    check_point(plan, point, plan_path)
    paths: dict[str, Path | None] = {}
    for key, given in (("models", models), ("cluster", cluster), ("slo", slo)):
        paths[key] = given or recorded_path(plan_path, plan, key)
    models_path = _needed(plan_path, paths, "models")
    cluster_path = _needed(plan_path, paths, "cluster")
    if need_slo:
        _needed(plan_path, paths, "slo")
    ms = load_models(models_path)
    cl = load_cluster(cluster_path)
    check_plan(plan, cl, ms, file=str(plan_path))
    sl = None
    if paths["slo"] is not None:
        from planner.schemas import check_slo_models

        sl = load_slo(paths["slo"])
        check_slo_models(sl, ms, str(paths["slo"]))
    prof = profiles or recorded_path(plan_path, plan, "profiles")
    calib, warnings = calibration(prof)
    return PlanInputs(
        plan=plan,
        plan_path=plan_path,
        cluster=cl,
        cluster_path=cluster_path,
        models=ms,
        models_path=models_path,
        slo=sl,
        slo_path=paths["slo"],
        profiles_path=prof,
        calib=calib,
        warnings=warnings,
    )


def _needed(plan_path: Path, paths: dict[str, Path | None], key: str) -> Path:
    """The file of input `key`: given or recorded, else an error saying to pass it."""
    path = paths[key]
    if path is None:
        raise InputError(
            f"the plan records no {key} file",
            file=str(plan_path),
            path=f"inputs.{key}",
            fix=f"pass --{key} {key.upper()}.yaml",
        )
    return path


__all__ = ["PlanInputs", "calibration", "calibration_refs", "recorded_path", "resolve"]
