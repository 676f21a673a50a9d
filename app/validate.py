"""The validate service (`planner validate FILE...`, `planner schema KIND`): check input
files (every problem named: file, field, fix), each against the others given with it, and
the JSON Schema of each file kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.errors import InputError

_TRACE_SUFFIXES = (".csv", ".jsonl", ".parquet", ".sqlite", ".db")
KINDS = ("cluster", "models", "slo", "plan", "profile", "keys", "trace", "workload")
_WORKLOAD_KEYS = ("roles", "users", "days")  # a `workload synth` spec has no `kind:`


def _looks_like_workload(path: Path) -> bool:
    from planner.io import read_yaml

    if path.suffix.lower() not in (".yaml", ".yml") or not path.exists():
        return False
    try:
        data = read_yaml(path)
    except InputError:
        return False
    if not isinstance(data, dict):
        return False
    if "kind" in data:
        return bool(data["kind"] == "workload")
    return any(k in data for k in _WORKLOAD_KEYS)


def _validate_workload(path: Path, model_names: list[str] | None) -> dict[str, Any]:
    """A `planner workload synth` spec: its keys overlay the generator's defaults."""
    from planner.app.files import synth_spec

    synth_spec(path, model_names)
    return {"file": str(path), "kind": "workload", "ok": True}


def _recorded(plan: Any, plan_path: Path, key: str) -> Path | None:
    """The input file a plan records under `key`; None when it records none."""
    from planner.app.inputs import recorded_path

    return recorded_path(plan_path, plan, key)


def _check_plan(plan: Any, path: Path, cluster: Any, models: Any) -> dict[str, Any]:
    """The plan check of every plan-reading command, against the given or recorded inputs."""
    from planner import schemas
    from planner.optimizer.invariants import check_plan

    if cluster is None and (p := _recorded(plan, path, "cluster")) is not None:
        cluster = schemas.load_cluster(p)
    if models is None and (p := _recorded(plan, path, "models")) is not None:
        models = schemas.load_models(p)
    if cluster is None or models is None:
        return {"cross_checked": False}
    check_plan(plan, cluster, models, file=str(path))
    return {"cross_checked": True}


def validate_file(
    path: Path,
    kind: str | None,
    model_names: list[str] | None,
    cluster: Any = None,
    models: Any = None,
    parsed: Any = None,
) -> dict[str, Any]:
    """Validate one file; returns a summary, raises InputError on the first problem.

    `parsed`: the file's schema object when the caller already loaded it (read once)."""
    from planner import schemas

    if kind == "trace" or (kind is None and path.suffix.lower() in _TRACE_SUFFIXES):
        if not path.exists():
            raise InputError("file not found", file=str(path), fix="check the path")
        from planner.trace.frame import read_trace

        df = read_trace(path, model_names)
        return {
            "file": str(path),
            "kind": "trace",
            "ok": True,
            "rows": len(df),
            **df.attrs.get("counts", {}),
        }
    if parsed is None and (kind == "workload" or (kind is None and _looks_like_workload(path))):
        return _validate_workload(path, model_names)
    obj = parsed if parsed is not None else schemas.load(path, kind)
    found = getattr(obj, "kind", kind)
    out: dict[str, Any] = {"file": str(path), "kind": found, "ok": True}
    if found == "plan":
        out |= _check_plan(obj, path, cluster, models)
    elif found == "slo" and models is not None:
        schemas.check_slo_models(obj, models, file=str(path))
    elif found == "keys" and models is not None:
        from planner.schemas.keys import check_keys

        check_keys(obj, str(path), models.names)
    return out


def _checked(path: Path, *args: Any) -> dict[str, Any]:
    """`validate_file`'s summary, or the file's errors (every one) as data: one bad file does
    not hide the others, and --json reports failures as JSON too."""
    try:
        return validate_file(path, *args)
    except InputError as e:
        one = {"path": e.path or "", "message": e.message, "fix": e.fix}
        problems: list[Any] = e.problems or [one]  # JSON rows: a fix may be null
        return {
            "file": str(path),
            "ok": False,
            "error": e.message,
            "path": e.path or "",
            "fix": e.fix or "",
            "problems": problems,
        }


def _models_and_clusters(files: list[Path]) -> dict[Path, tuple[str, Any]]:
    """The models and cluster files among `files` (YAML whose kind says so), parsed: files
    given together cross-check each other without the flags (each read once). A file that
    does not parse is left to `validate_file` to report."""
    from planner import schemas
    from planner.io import read_yaml

    parsed: dict[Path, tuple[str, Any]] = {}
    for f in files:
        if f.suffix.lower() not in (".yaml", ".yml") or not f.exists():
            continue
        try:
            data = read_yaml(f)
            k = schemas.detect_kind(data, str(f))
            if k in ("models", "cluster"):
                parsed[f] = (k, schemas.parse(data, k, str(f)))
        except InputError:
            continue
    return parsed


def validate(
    files: list[Path],
    kind: str | None = None,
    models_file: Path | None = None,
    cluster_file: Path | None = None,
) -> list[dict[str, Any]]:
    """Each file's summary, or its errors (every one) as data (`ok: false`): models and
    cluster files given together cross-check the others without the flags."""
    from planner import schemas

    check_kind(kind, "--kind")
    models = schemas.load_models(models_file) if models_file else None
    cluster = schemas.load_cluster(cluster_file) if cluster_file else None
    parsed = _models_and_clusters(files) if kind is None else {}
    for k, doc in parsed.values():  # the first given, unless a flag gave one
        if k == "models" and models is None:
            models = doc
        elif k == "cluster" and cluster is None:
            cluster = doc
    names = models.names if models is not None else None
    return [
        _checked(f, kind, names, cluster, models, parsed.get(f, (None, None))[1]) for f in files
    ]


def check_kind(kind: str | None, flag: str) -> None:
    """A file kind this command knows (None: any)."""
    if kind is not None and kind not in KINDS:
        raise InputError(f"unknown kind {kind!r}", path=flag, fix=f"use one of {list(KINDS)}")


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of a file kind."""
    from planner import schemas

    check_kind(kind, "KIND")
    if kind == "trace":
        from planner.trace.frame import TRACE_JSON_SCHEMA

        return dict(TRACE_JSON_SCHEMA)
    if kind == "workload":
        from planner.optimizer.workload.synth_spec import SynthSpec

        return SynthSpec.model_json_schema()
    out: dict[str, Any] = schemas.json_schema(kind)
    return out
