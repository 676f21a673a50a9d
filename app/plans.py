"""One function that turns a search result into a plan, for `optimize` and re-optimization
alike: the same notes (overload, search), capacity table, knobs and held-back days."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def provenance(base: Path | None = None, **paths: Path | None) -> dict[str, Any]:
    """{name: {path, sha256}} for each input given (a folder hashes its YAML files).

    `base`: the folder of the plan file being written: paths are stored relative to it
    (absolute when no relative path exists), so the plan finds its inputs from any folder.
    """
    import hashlib

    from planner.io import sha256_file
    from planner.schemas.plan import InputRef

    out: dict[str, Any] = {}
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
    result: Any,
    cfg: Any,
    *,
    inputs: dict[str, Any],
    trace: Any,
    seed: int,
    search: dict[str, Any] | None = None,
    calibration: dict[str, Any] | None = None,
) -> Any:
    """The Plan of `result` (`optimizer.search.optimize`'s) under `cfg` (its OptimizeConfig):
    `inputs` the provenance, `trace` the traffic it was optimized on, `search` extra fields,
    `calibration` the runs each GPU type's factors came from (`inputs.calibration_refs`)."""
    from planner.optimizer.evaluation import knobs_to_dict
    from planner.optimizer.workload.characterize import summarize
    from planner.schemas.plan import Plan

    overloaded = result.capacity is not None and result.capacity.overloaded
    overload = (
        ["demand beyond what the cluster can serve:", *result.capacity.lines()]
        if overloaded
        else []
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
            **(search or {}),
        },
        selected=result.selected,
        points=result.points,
        notes=[*result.notes, *overload],
        capacity=result.capacity.rows if overloaded else [],
        hops=result.hops,
    )


__all__ = ["plan_from_result", "provenance"]
