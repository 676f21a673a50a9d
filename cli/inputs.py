"""Loading what several commands take: input files, workloads, profiles, provenance."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.schemas import load_cluster, load_models, load_slo
from planner.schemas.cluster import Cluster
from planner.schemas.models import Models
from planner.schemas.slo import Slo


def cluster(path: Path) -> Cluster:
    """cluster.yaml, validated."""
    return load_cluster(path)


def models(path: Path) -> Models:
    """models.yaml, validated."""
    return load_models(path)


def slo(path: Path) -> Slo:
    """slo.yaml, validated."""
    return load_slo(path)


def workload(path: Path, ms: Models, seed: int):
    """A trace file, or a synth spec (.yaml) generated on the fly for the catalog's models."""
    from planner.trace import read_trace

    if path.suffix in (".yaml", ".yml"):
        from planner.optimizer.workload.synth import bind_models, synth

        spec, _ = bind_models(synth_spec(path), ms.names)
        return synth(spec, seed=seed)
    return read_trace(path, ms.names)


def synth_spec(path: Path):
    """A workload spec file: its keys overlaid on the default spec (roles merge field by field)."""
    from pydantic import ValidationError

    from planner.io import read_yaml
    from planner.optimizer.workload.synth import SynthSpec, default_spec
    from planner.schemas import validation_to_input_error

    data = read_yaml(path, "workload")
    if not isinstance(data, dict):
        raise InputError(
            "a workload spec is a mapping of fields",
            file=str(path),
            fix="see `planner workload synth --print-spec`",
        )
    data.pop("kind", None)
    merged = _deep_merge(default_spec().model_dump(mode="json"), data)
    try:
        return SynthSpec.model_validate(merged)
    except ValidationError as e:
        raise validation_to_input_error(e, str(path), "workload", SynthSpec) from None


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = (
            _deep_merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
        )
    return out


def calibration(profiles: Path | None) -> dict[str, Any] | None:
    """GPU type -> Calib fitted in the profiles under `profiles` (a folder or a file)."""
    if profiles is None:
        return None
    if not profiles.exists():
        raise InputError(
            "no such profile folder or file",
            file=str(profiles),
            fix="pass the folder `planner profile` wrote",
        )
    from planner.cli.common import err_console
    from planner.optimizer.perf import calib_from_profile
    from planner.profiler.store import load_profiles, warnings_here

    found = load_profiles([profiles])
    for w in warnings_here(found):
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False)
    return {p.gpu_type: calib_from_profile(p) for p in found}


def input_path(given: Path | None, plan: Any, plan_path: Path | None, key: str) -> Path:
    """An input file: the flag, else the path recorded in the plan (next to the plan, then as given)."""
    if given is not None:
        return given
    ref = plan.inputs.get(key) if plan is not None else None
    if ref is None or not ref.path:
        raise InputError(
            f"no {key} file: the plan does not record one"
            if plan is not None
            else f"--{key} is required",
            path=f"--{key}",
            fix=f"pass --{key} FILE",
        )
    p = Path(ref.path).expanduser()
    if not p.is_absolute() and plan_path is not None and (plan_path.parent / p).exists():
        return plan_path.parent / p
    return p


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


def scorer(trace, sl: Slo):
    """The optimizer's scorer (kept for callers not yet on `planner.optimizer.scoring`)."""
    from planner.optimizer.scoring import scorer as _scorer

    return _scorer(trace, sl)


@contextlib.contextmanager
def quiet_c_stdout() -> Iterator[None]:
    """Silence C-level writes to stdout (the HiGHS banner) so --json stays parseable."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # captured stdout (tests): nothing to guard
        yield
        return
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def silence_solver_banner() -> None:
    """HiGHS prints a banner on stdout at its first instance in a process: take it now, quietly."""
    try:
        import highspy
    except ImportError:
        return
    with quiet_c_stdout():
        highspy.Highs()
