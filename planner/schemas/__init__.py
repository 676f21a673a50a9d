"""Loading and validating the input files (cluster, models, slo, plan, profile)."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from planner.errors import InputError
from planner.io import read_yaml
from planner.schemas.cluster import Cluster
from planner.schemas.models import Models
from planner.schemas.plan import Plan
from planner.schemas.profile import Profile
from planner.schemas.slo import Slo

KINDS: dict[str, type[BaseModel]] = {
    "cluster": Cluster,
    "models": Models,
    "slo": Slo,
    "plan": Plan,
    "profile": Profile,
}

_FIXES = {
    "extra_forbidden": "remove the key, or check its spelling against `planner schema {kind}`",
    "missing": "add the field; `planner schema {kind}` lists the required ones",
    "greater_than_equal": "use a value in the allowed range",
    "greater_than": "use a value in the allowed range",
    "less_than_equal": "use a value in the allowed range",
    "literal_error": "use one of the allowed values",
}


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "GpuSpec", "ModelArch", "function-after[_known_type(), str]"):
            continue  # union-branch labels pydantic adds; not a user path
        elif str(part).startswith(("function-", "union[")):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _extra_hint(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """`did you mean` for an unknown key, from the fields of the object that holds it."""
    key = str(loc[-1])
    cls: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or cls is None:
            continue
        field = getattr(cls, "model_fields", {}).get(part)
        if field is None:
            cls = None
            break
        ann = field.annotation
        args = getattr(ann, "__args__", ()) or (ann,)
        cls = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if cls is None:
            for a in args:
                inner = getattr(a, "__args__", ())
                cls = next(
                    (b for b in inner if isinstance(b, type) and issubclass(b, BaseModel)), None
                )
                if cls:
                    break
    names = list(getattr(cls, "model_fields", {}) or {})
    close = difflib.get_close_matches(key, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def validation_to_input_error(
    e: ValidationError, file: str, kind: str, model: type[BaseModel]
) -> InputError:
    """The first pydantic error as one InputError naming file, field path and a fix."""
    errs = e.errors(include_url=False)
    # Prefer the most specific branch of a union (the longest location).
    first = max(errs, key=lambda x: (x["type"] != "string_type", len(x["loc"])))
    path = _loc(first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = f"unknown key{_extra_hint(model, first['loc'])}"
    fix = _FIXES.get(first["type"], "see `planner schema {kind}`").format(kind=kind)
    more = f" (and {len(errs) - 1} more error(s))" if len(errs) > 1 else ""
    return InputError(msg + more, file=file, path=path, fix=fix)


def detect_kind(data: Any, file: str) -> str:
    """The `kind:` of a document, or a guess from its keys."""
    if not isinstance(data, dict):
        raise InputError(
            f"expected a mapping at the top level, found {type(data).__name__}",
            file=file,
            fix="start the file with `kind: cluster|models|slo|plan|profile`",
        )
    kind = data.get("kind")
    if kind is None:
        if "nodes" in data:
            return "cluster"
        if "models" in data and isinstance(data["models"], list):
            return "models"
        if "points" in data:
            return "plan"
        if "default" in data or "attainment" in data:
            return "slo"
        raise InputError(
            "cannot tell what kind of file this is",
            file=file,
            path="kind",
            fix="add `kind: cluster|models|slo|plan|profile`",
        )
    if kind not in KINDS:
        close = difflib.get_close_matches(str(kind), list(KINDS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(
            f"unknown kind {kind!r}{hint}",
            file=file,
            path="kind",
            fix=f"use one of {sorted(KINDS)}",
        )
    return str(kind)


def parse(data: Any, kind: str, file: str = "<data>") -> BaseModel:
    """Validate already-parsed YAML as `kind`."""
    model = KINDS[kind]
    try:
        obj = model.model_validate(data)
    except ValidationError as e:
        raise validation_to_input_error(e, file, kind, model) from None
    if isinstance(obj, Models):
        _resolve_architectures(obj, file)
    return obj


def _resolve_architectures(models: Models, file: str) -> None:
    base = Path(file).parent if file and not file.startswith("<") else None
    for i, m in enumerate(models.models):
        m._base_dir = base
        try:
            _ = m.arch
        except ValueError as e:
            raise InputError(
                str(e),
                file=file,
                path=f"models[{i}].architecture",
                fix="use a name from `planner catalog models`",
            ) from None


def load(path: str | Path, kind: str | None = None) -> Any:
    """Read and validate a YAML input file; `kind` is checked against the file's own."""
    file = str(path)
    data = read_yaml(path, kind)
    found = detect_kind(data, file)
    if kind is not None and found != kind:
        raise InputError(
            f"expected a {kind} file, found kind {found!r}",
            file=file,
            path="kind",
            fix=f"pass the {kind} file here",
        )
    return parse(data, found, file)


def load_cluster(path: str | Path) -> Cluster:
    """cluster.yaml."""
    return load(path, "cluster")


def load_models(path: str | Path) -> Models:
    """models.yaml."""
    return load(path, "models")


def load_slo(path: str | Path) -> Slo:
    """slo.yaml."""
    return load(path, "slo")


def load_plan(path: str | Path) -> Plan:
    """plan.yaml."""
    return load(path, "plan")


def load_profile(path: str | Path) -> Profile:
    """A profile YAML."""
    return load(path, "profile")


def json_schema(kind: str) -> dict[str, Any]:
    """JSON Schema of a file kind."""
    if kind not in KINDS:
        raise InputError(f"unknown kind {kind!r}", path="KIND", fix=f"use one of {sorted(KINDS)}")
    return KINDS[kind].model_json_schema()


def check_plan(plan: Plan, cluster: Cluster, models: Models, file: str = "<plan>") -> None:
    """Cross-file checks: nodes, GPUs, models, variants exist; TP divides the heads."""
    for pi, point in enumerate(plan.points):
        for ii, inst in enumerate(point.instances):
            where = f"points[{pi}].instances[{ii}]"
            try:
                node = cluster.node(inst.node)
            except KeyError:
                raise InputError(
                    f"node {inst.node!r} is not in the cluster",
                    file=file,
                    path=f"{where}.node",
                    fix=f"use one of {[n.name for n in cluster.nodes]}",
                ) from None
            ids = node.device_ids()
            bad = [g for g in inst.gpus if g not in ids]
            if bad:
                raise InputError(
                    f"GPU ids {bad} do not exist on node {node.name!r} (it has {ids})",
                    file=file,
                    path=f"{where}.gpus",
                    fix="use device ids the node has",
                )
            try:
                m = models.model(inst.model)
            except KeyError:
                raise InputError(
                    f"model {inst.model!r} is not in the models file",
                    file=file,
                    path=f"{where}.model",
                    fix=f"use one of {models.names}",
                ) from None
            try:
                m.variant(inst.variant)
            except KeyError:
                raise InputError(
                    f"variant {inst.variant!r} is not a variant of {m.name!r}",
                    file=file,
                    path=f"{where}.variant",
                    fix=f"use one of {[v.name for v in m.variants]}",
                ) from None
            check_tp(m.arch.num_attention_heads, m.arch.num_kv_heads, inst.tp, file, f"{where}.tp")


def tp_divides(num_heads: int, num_kv_heads: int, tp: int) -> bool:
    """vLLM shards attention heads: TP must divide the query heads (KV heads replicate past them)."""
    return num_heads % tp == 0 and (num_kv_heads % tp == 0 or tp % num_kv_heads == 0)


def check_tp(num_heads: int, num_kv_heads: int, tp: int, file: str | None, path: str) -> None:
    """InputError naming the TP degrees that work when `tp` does not divide the heads."""
    if not tp_divides(num_heads, num_kv_heads, tp):
        ok = [t for t in (1, 2, 4, 8, 16) if tp_divides(num_heads, num_kv_heads, t)]
        raise InputError(
            f"tp={tp} does not divide the {num_heads} attention heads / {num_kv_heads} KV heads",
            file=file,
            path=path,
            fix=f"use a TP degree in {ok}",
        )
