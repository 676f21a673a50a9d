"""`planner validate FILE...` and `planner schema KIND`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import JsonOpt, console, print_error, print_json
from planner.errors import InputError

_TRACE_SUFFIXES = (".csv", ".jsonl", ".parquet", ".sqlite", ".db")
_KINDS = ("cluster", "models", "slo", "plan", "profile", "keys", "trace", "workload")
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
        return data["kind"] == "workload"
    return any(k in data for k in _WORKLOAD_KEYS)


def _validate_workload(path: Path, model_names: list[str] | None) -> dict[str, Any]:
    """A `planner workload synth` spec: its keys overlay the generator's defaults."""
    from planner.cli.inputs import synth_spec

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
            "file": str(path), "kind": "trace", "ok": True, "rows": len(df),
            **df.attrs.get("counts", {}),
        }  # fmt: skip
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
        schemas.check_keys(obj, str(path), models.names)
    return out


def _checked(path: Path, *args: Any) -> dict[str, Any]:
    """`validate_file`'s summary, or the file's errors (every one) as data: one bad file does
    not hide the others, and --json reports failures as JSON too."""
    try:
        return validate_file(path, *args)
    except InputError as e:
        problems = e.problems or [{"path": e.path or "", "message": e.message, "fix": e.fix}]
        return {
            "file": str(path), "ok": False, "error": e.message, "path": e.path or "",
            "fix": e.fix or "", "problems": problems,
        }  # fmt: skip


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


def _print_results(results: list[dict[str, Any]]) -> None:
    """Each failed file's error and fix, then a line for each file that passed."""
    for r in results:
        if not r["ok"]:
            print_error(r["error"] + (f"\n  fix: {r['fix']}" if r["fix"] else ""))
    for r in results:
        if not r["ok"]:
            continue
        extra = f", {r['rows']} rows" if "rows" in r else ""
        extra += "".join(
            f", {r[k]} {k.replace('_', ' ')}" for k in ("out_of_order", "duplicates") if r.get(k)
        )
        if r.get("cross_checked") is False:
            extra += "; not checked against a cluster and models (pass --cluster, --models)"
        console.print(f"[green]ok[/] {r['file']} ({r['kind']}{extra})", highlight=False)


def register(app: typer.Typer) -> None:
    """Add `planner validate` and `planner schema`."""

    @app.command()
    def validate(
        files: Annotated[
            list[Path],
            typer.Argument(
                metavar="FILE",
                help="Input files: YAML (cluster, models, slo, plan, profile, keys) or traces.",
            ),
        ],
        kind: Annotated[
            str | None, typer.Option("--kind", help=f"Force the kind: {', '.join(_KINDS)}.")
        ] = None,
        models_file: Annotated[
            Path | None,
            typer.Option(
                "--models",
                help="models.yaml: traces must name only its models; plans are cross-checked.",
            ),
        ] = None,
        cluster_file: Annotated[
            Path | None,
            typer.Option("--cluster", help="cluster.yaml: plans are cross-checked against it."),
        ] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Check input files; every problem is named (file, field, fix), then exit code 2."""
        from planner import schemas

        if kind is not None and kind not in _KINDS:
            raise InputError(
                f"unknown kind {kind!r}", path="--kind", fix=f"use one of {list(_KINDS)}"
            )
        models = schemas.load_models(models_file) if models_file else None
        cluster = schemas.load_cluster(cluster_file) if cluster_file else None
        parsed = _models_and_clusters(files) if kind is None else {}
        for k, doc in parsed.values():  # the first given, unless a flag gave one
            if k == "models" and models is None:
                models = doc
            elif k == "cluster" and cluster is None:
                cluster = doc
        names = models.names if models is not None else None
        results = [
            _checked(f, kind, names, cluster, models, parsed.get(f, (None, None))[1]) for f in files
        ]
        failed = [r for r in results if not r["ok"]]
        if json_out:
            print_json(results)
            if failed:
                raise typer.Exit(2)
            return
        _print_results(results)
        if failed:
            raise typer.Exit(2)

    @app.command()
    def schema(
        kind: Annotated[str, typer.Argument(metavar="KIND", help=f"One of {', '.join(_KINDS)}.")],
    ) -> None:
        """Print the JSON Schema of a file kind."""
        from planner import schemas

        if kind not in _KINDS:
            raise InputError(
                f"unknown kind {kind!r}", path="KIND", fix=f"use one of {list(_KINDS)}"
            )
        if kind == "trace":
            from planner.trace.frame import TRACE_JSON_SCHEMA

            print_json(TRACE_JSON_SCHEMA)
            return
        if kind == "workload":
            from planner.optimizer.workload.synth_spec import SynthSpec

            print_json(SynthSpec.model_json_schema())
            return
        print_json(schemas.json_schema(kind))
