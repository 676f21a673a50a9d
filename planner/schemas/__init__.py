"""Loading and validating the input files (cluster, models, slo, plan, profile, keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from planner.errors import InputError
from planner.io import read_yaml
from planner.schemas.cluster import Cluster
from planner.schemas.common import did_you_mean
from planner.schemas.keys import Keys
from planner.schemas.keys import check_keys as check_keys  # re-exported (cli/validate.py)
from planner.schemas.models import Models, arch_problem
from planner.schemas.plan import Plan
from planner.schemas.problems import path_key as path_key  # re-exported (cli/inputs.py)
from planner.schemas.problems import validation_to_input_error as validation_to_input_error
from planner.schemas.profile import Profile
from planner.schemas.slo import Slo

KINDS: dict[str, type[BaseModel]] = {
    "cluster": Cluster,
    "models": Models,
    "slo": Slo,
    "plan": Plan,
    "profile": Profile,
    "keys": Keys,
}


def detect_kind(data: Any, file: str) -> str:
    """The `kind:` of a document, or a guess from its keys."""
    if not isinstance(data, dict):
        raise InputError(
            f"expected a mapping at the top level, found {type(data).__name__}",
            file=file,
            path="(top level)",
            fix="start the file with `kind: cluster|models|slo|plan|profile|keys`",
        )
    kind = data.get("kind")
    if kind is not None and not isinstance(kind, str):
        raise InputError(
            f"kind must be a word, found a {type(kind).__name__}",
            file=file,
            path="kind",
            fix="start the file with `kind: cluster|models|slo|plan|profile|keys`",
        )
    if kind is None:
        if "nodes" in data:
            return "cluster"
        if "models" in data and isinstance(data["models"], list):
            return "models"
        if "points" in data:
            return "plan"
        if "default" in data or "attainment" in data:
            return "slo"
        if "keys" in data:
            return "keys"
        raise InputError(
            "cannot tell what kind of file this is",
            file=file,
            path="kind",
            fix="add `kind: cluster|models|slo|plan|profile|keys`",
        )
    if kind not in KINDS:
        raise InputError(
            f"unknown kind {kind!r}{did_you_mean(kind, KINDS)}",
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
        check_substitutes(obj, file)
    if isinstance(obj, Keys):
        check_keys(obj, file)
    return obj


def check_substitutes(models: Models, file: str = "<models>") -> None:
    """Declared stand-ins name known models and variants other than the model itself, hold
    the model's whole context, and never lead back to it (no cycle of stand-ins)."""
    names = models.names
    for i, m in enumerate(models.models):
        for j, sub in enumerate(m.substitutes):
            where = f"models[{i}].substitutes[{j}]"
            if sub.model not in names:
                raise InputError(
                    f"stand-in {sub.model!r} of {m.name!r} is not a model of this file"
                    f"{did_you_mean(sub.model, names)}",
                    file=file,
                    path=f"{where}.model",
                    fix=f"name one of {names}",
                )
            other = models.model(sub.model)
            if sub.variant is not None and sub.variant not in [v.name for v in other.variants]:
                raise InputError(
                    f"{sub.model!r} has no variant {sub.variant!r}",
                    file=file,
                    path=f"{where}.variant",
                    fix=f"use one of {[v.name for v in other.variants]} or leave it out",
                )
            if other.max_context < m.max_context:
                raise InputError(
                    f"stand-in {sub.model!r} holds {other.max_context} tokens of context, fewer "
                    f"than {m.name!r}'s max_context {m.max_context}",
                    file=file,
                    path=f"{where}.model",
                    fix=f"name a model with max_context >= {m.max_context}, or lower "
                    f"models[{i}].max_context",
                )
        cycle = _substitute_cycle(models, m.name)
        if cycle:
            raise InputError(
                "stand-ins form a cycle: " + " -> ".join(cycle),
                file=file,
                path=f"models[{i}].substitutes",
                fix=f"remove {cycle[1]!r} from the substitutes of {m.name!r} (or the link "
                "back): a model cannot stand in for a model that stands in for it",
            )


def _substitute_cycle(models: Models, start: str) -> list[str]:
    """A chain of stand-ins from `start` back to itself ([] when there is none)."""
    stack = [(start, [start])]
    seen: set[str] = set()
    while stack:
        name, path = stack.pop()
        for sub in models.model(name).substitutes:
            if sub.model == start:
                return [*path, start]
            if sub.model not in seen:
                seen.add(sub.model)
                stack.append((sub.model, [*path, sub.model]))
    return []


def _resolve_architectures(models: Models, file: str) -> None:
    base = Path(file).parent if file and not file.startswith("<") else None
    for i, m in enumerate(models.models):
        m._base_dir = base
        where = f"models[{i}].architecture"
        try:
            arch = m.arch
        except (ValueError, RecursionError) as e:
            msg = str(e) if isinstance(e, ValueError) else "config.json is nested too deep"
            raise InputError(
                msg, file=file, path=where, fix="use a name from `planner catalog models`"
            ) from None
        bad = arch_problem(arch)
        if bad is not None:
            field, msg = bad
            raise InputError(
                msg,
                file=file,
                path=f"{where}.{field}" if not isinstance(m.architecture, str) else where,
                fix="use the numbers of the model's config.json (`planner catalog models`)",
            )


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
    out: Cluster = load(path, "cluster")
    return out


def load_models(path: str | Path) -> Models:
    """models.yaml."""
    out: Models = load(path, "models")
    return out


def load_slo(path: str | Path) -> Slo:
    """slo.yaml."""
    out: Slo = load(path, "slo")
    return out


def load_plan(path: str | Path) -> Plan:
    """plan.yaml."""
    out: Plan = load(path, "plan")
    return out


def load_profile(path: str | Path) -> Profile:
    """A profile YAML."""
    out: Profile = load(path, "profile")
    return out


def json_schema(kind: str) -> dict[str, Any]:
    """JSON Schema of a file kind."""
    if kind not in KINDS:
        raise InputError(f"unknown kind {kind!r}", path="KIND", fix=f"use one of {sorted(KINDS)}")
    return KINDS[kind].model_json_schema()


def check_slo_models(slo: Slo, models: Models, file: str = "<slo>") -> None:
    """Every per-model override of `slo` names a model of `models` (a typo is not dropped)."""
    for name in slo.models:
        if name not in models.names:
            raise InputError(
                f"an override for model {name!r}, which is not in the models file"
                f"{did_you_mean(name, models.names)}",
                file=file,
                path=f"models.{path_key(name)}",
                fix=f"use one of {models.names}",
            )


def check_pins(models: Models, cluster: Cluster, file: str = "<models>") -> None:
    """Every `pin:` names a node of the cluster and a GPU type it has there."""
    types = {
        n.name: {g.type if isinstance(g.type, str) else g.type.name for g in n.gpus}
        for n in cluster.nodes
    }
    for i, m in enumerate(models.models):
        pin = m.pin
        if pin is None:
            continue
        where = types if pin.node is None else {pin.node: types.get(pin.node, set())}
        if pin.node is not None and types.get(pin.node) is None:
            raise InputError(
                f"model {m.name!r} is pinned to node {pin.node!r}, which is not in the cluster"
                f"{did_you_mean(pin.node, types)}",
                file=file,
                path=f"models[{i}].pin.node",
                fix=f"use one of {sorted(types)}",
            )
        if pin.gpu_type is not None and not any(pin.gpu_type in t for t in where.values()):
            have = sorted(set().union(*where.values()))
            raise InputError(
                f"model {m.name!r} is pinned to GPU type {pin.gpu_type!r}, which "
                + (f"node {pin.node!r} does not have" if pin.node else "the cluster does not have"),
                file=file,
                path=f"models[{i}].pin.gpu_type",
                fix=f"use one of {have}",
            )


def tp_divides(num_heads: int, num_kv_heads: int, tp: int) -> bool:
    """vLLM shards attention heads: TP must divide the query heads (KV heads replicate past them)."""
    return num_heads % tp == 0 and (num_kv_heads % tp == 0 or tp % num_kv_heads == 0)


def tp_problem(num_heads: int, num_kv_heads: int, tp: int) -> tuple[str, str] | None:
    """(message, fix naming the TP degrees that work) when `tp` does not divide the heads."""
    if tp_divides(num_heads, num_kv_heads, tp):
        return None
    ok = [t for t in (1, 2, 4, 8, 16) if tp_divides(num_heads, num_kv_heads, t)]
    return (
        f"tp={tp} does not divide the {num_heads} attention heads / {num_kv_heads} KV heads",
        f"use a TP degree in {ok}",
    )


def check_tp(num_heads: int, num_kv_heads: int, tp: int, file: str | None, path: str) -> None:
    """InputError naming the TP degrees that work when `tp` does not divide the heads."""
    bad = tp_problem(num_heads, num_kv_heads, tp)
    if bad is not None:
        raise InputError(bad[0], file=file, path=path, fix=bad[1])
