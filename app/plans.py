"""The one optimize pipeline: `optimize_plan` turns the inputs and a full OptimizeConfig
into a plan, for `planner optimize`, `adjust --reoptimize`, the nightly re-plan and the
benches alike: the same search (no scorer: the config's held-back days), the same notes
(overload, search), capacity table, knobs and held-back days. The plan records the whole
config (`search.config`); `config_from_plan` rebuilds it, so a re-optimization searches as
the plan's own optimize did."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from planner.optimizer.config import OptimizeConfig
    from planner.optimizer.evaluation import SearchResult
    from planner.optimizer.perf import Calib
    from planner.schemas.cluster import Cluster
    from planner.schemas.models import Models
    from planner.schemas.plan import CalibrationRef, InputRef, Plan
    from planner.schemas.slo import Slo


def provenance(base: Path | None = None, **paths: Path | None) -> dict[str, InputRef]:
    """{name: {path, sha256}} for each input given (a folder hashes its YAML files).

    `base`: the folder of the plan file being written: paths are stored relative to it
    (absolute when no relative path exists), so the plan finds its inputs from any folder.
    """
    import hashlib

    from planner.io import sha256_file
    from planner.schemas.plan import InputRef

    out: dict[str, InputRef] = {}
    for name, p in paths.items():
        if p is None:
            continue
        stored = str(p)
        if base is not None:
            try:
                stored = os.path.relpath(p.resolve(), Path(base).resolve())
            except ValueError:  # another drive (Windows): keep it absolute
                stored = str(p.resolve())
        if p.is_dir():
            h = hashlib.sha256()
            for f in sorted(p.glob("*.yaml")):
                h.update(f.name.encode() + b"\0" + sha256_file(f).encode())
            out[name] = InputRef(path=stored, sha256=h.hexdigest())
        else:
            out[name] = InputRef(path=stored, sha256=sha256_file(p))
    return out


def plan_from_result(
    result: SearchResult,
    cfg: OptimizeConfig,
    *,
    inputs: dict[str, InputRef],
    trace: pd.DataFrame,
    seed: int,
    search: dict[str, Any] | None = None,
    calibration: dict[str, CalibrationRef] | None = None,
) -> Plan:
    """The Plan of `result` (`optimizer.search.optimize`'s) under `cfg` (its OptimizeConfig):
    `inputs` the provenance, `trace` the traffic it was optimized on, `search` extra fields,
    `calibration` the runs each GPU type's factors came from (`inputs.calibration_refs`)."""
    from planner.optimizer.evaluation import knobs_to_dict
    from planner.optimizer.workload.characterize import summarize
    from planner.schemas.plan import Plan

    # the capacity report, where the demand is beyond what the cluster can serve
    over = result.capacity if result.capacity is not None and result.capacity.overloaded else None
    overload = (
        ["demand beyond what the cluster can serve:", *over.lines()] if over is not None else []
    )
    return Plan(
        inputs=inputs,
        calibration=calibration or {},
        workload_summary=summarize(trace),
        search={
            "seed": seed,
            "evals": cfg.evals,
            "solver": cfg.solver,
            "feasible_evals": sum(e.feasible for e in result.evaluations),
            "max_tp": cfg.max_tp,
            "max_replicas": cfg.max_replicas,
            "knobs": {n: knobs_to_dict(k) for n, k in result.knobs.items()},
            "validate_days": result.validate_days,
            "fit_requests": result.fit_requests,
            "held_requests": result.held_requests,
            "held_days": [{"day": d, "requests": n} for d, n in result.held_days],
            # the rule that chose them (`--held-back`), where days are held back
            **({"held_back": cfg.held_back} if result.validate_days else {}),
            # the whole config: re-optimization rebuilds it (`config_from_plan`)
            "config": cfg.model_dump(mode="json"),
            **(search or {}),
        },
        selected=result.selected,
        points=result.points,
        notes=[*result.notes, *overload],
        capacity=over.rows if over is not None else [],
        hops=result.hops,
    )


@dataclass(frozen=True)
class OptimizeInputs:
    """What a plan is optimized on: the loaded inputs and, for its provenance, their files."""

    cluster: Cluster
    models: Models
    slo: Slo
    trace: pd.DataFrame  # the traffic (trace schema)
    calib: dict[str, Calib] = field(default_factory=dict)  # GPU type -> Calib (empty: spec sheet)
    # cluster, models, slo, workload, profiles -> the file each came from (None: none)
    paths: dict[str, Path | None] = field(default_factory=dict)


def optimize_plan(
    inputs: OptimizeInputs,
    cfg: OptimizeConfig,
    *,
    out: Path | None = None,
    search: dict[str, Any] | None = None,
    progress: Callable[..., None] | None = None,
    clock: Callable[[], float] | None = None,
    job_map: Any = None,
) -> tuple[Plan, SearchResult]:
    """(Plan, SearchResult) of `optimizer.search.optimize` on `inputs` under `cfg` (a full
    OptimizeConfig, recorded in the plan). `out`: where the plan will be written (its input
    paths are stored relative to that folder); `search`: extra fields of `plan.search`."""
    from planner.forkmap import serial_map
    from planner.optimizer.search import SearchInputs, optimize

    search_inputs = SearchInputs(
        cluster=inputs.cluster,
        models=inputs.models,
        slo=inputs.slo,
        trace=inputs.trace,
        cfg=cfg,
        calib=inputs.calib or None,
        clock=clock or (lambda: 0.0),
        job_map=job_map or serial_map,
    )
    result = optimize(search_inputs, progress)
    base = out.parent if out is not None else None
    refs = provenance(base=base, **inputs.paths) if inputs.paths else {}
    from planner.app.inputs import calibration_refs

    plan = plan_from_result(
        result,
        cfg,
        inputs=refs,
        trace=inputs.trace,
        seed=cfg.seed,
        search=search,
        calibration=calibration_refs(inputs.paths.get("profiles")),
    )
    return plan, result


def config_from_plan(plan: Plan, **override: Any) -> OptimizeConfig:
    """The OptimizeConfig `plan` was made with (`search.config`; a plan written before it was
    recorded: the fields its search records), with `override` on top."""
    from planner.optimizer.config import OptimizeConfig

    s = plan.search
    if "config" in s:
        base = dict(s["config"])
    else:
        keys = ("seed", "evals", "solver", "max_tp", "max_replicas", "held_back")
        base = {k: s[k] for k in keys if k in s}
        if s.get("validate_days"):
            base["validate_days"] = s["validate_days"]
    return OptimizeConfig(**{**base, **override})


__all__ = ["OptimizeInputs", "config_from_plan", "optimize_plan", "plan_from_result", "provenance"]
