"""Loading what several commands take: input files, workloads and workload specs, checked
(an InputError names the file, the field and the fix). The services, the benches and the
adjuster's setup load through here."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from planner.errors import InputError
from planner.schemas import load_cluster, load_models, load_slo
from planner.schemas.cluster import Cluster
from planner.schemas.common import did_you_mean
from planner.schemas.models import Models
from planner.schemas.slo import Slo

if TYPE_CHECKING:
    import pandas as pd

    from planner.optimizer.workload.synth_spec import SynthSpec
    from planner.schemas.plan import Plan

MAX_SYNTH_REQUESTS = 10_000_000  # a workload spec expected to make more requests is refused


def cluster(path: Path) -> Cluster:
    """cluster.yaml, validated."""
    return load_cluster(path)


def models(path: Path) -> Models:
    """models.yaml, validated."""
    return load_models(path)


def slo(path: Path, ms: Models | None = None) -> Slo:
    """slo.yaml, validated; with the models, its per-model overrides must name them."""
    from planner.schemas import check_slo_models

    out = load_slo(path)
    if ms is not None:
        check_slo_models(out, ms, str(path))
    return out


def workload(path: Path, ms: Models, seed: int) -> pd.DataFrame:
    """A trace file, or a synth spec (.yaml) generated on the fly for the catalog's models."""
    from planner.trace.frame import read_trace

    if path.suffix in (".yaml", ".yml"):
        from planner.optimizer.workload.synth import synth
        from planner.optimizer.workload.synth_spec import bind_models

        spec, _ = bind_models(synth_spec(path, ms.names), ms.names)
        limits = {m.name: m.max_context for m in ms.models}
        return synth(spec, seed=seed, max_context=limits)
    return read_trace(path, ms.names)


def synth_spec(path: Path, model_names: Sequence[str] | None = None) -> SynthSpec:
    """A workload spec file: its keys overlaid on the default spec (roles merge field by field).

    With `model_names`, a role the file names a model for must name one of them (roles the
    file leaves at their defaults are mapped onto the models by `bind_models`).
    """
    from pydantic import ValidationError

    from planner.io import read_yaml
    from planner.optimizer.workload.synth_spec import SynthSpec, default_spec
    from planner.schemas.problems import path_key, validation_to_input_error

    data = read_yaml(path, "workload")
    if not isinstance(data, dict):
        raise InputError(
            "a workload spec is a mapping of fields",
            file=str(path),
            path="(top level)",
            fix="see `planner workload synth --print-spec`",
        )
    data.pop("kind", None)
    merged = _deep_merge(default_spec().model_dump(mode="json"), data)
    roles = data.get("roles")
    if isinstance(roles, dict):  # `role: null` removes a default role; other shapes: the schema
        _drop_roles(merged, [r for r, v in roles.items() if v is None])
    try:
        spec = SynthSpec.model_validate(merged)
    except ValidationError as e:
        raise validation_to_input_error(e, str(path), "workload", SynthSpec) from None
    check_spec_size(spec, str(path))
    for role, rs in (roles if isinstance(roles, dict) else {}).items():
        name = rs.get("model") if isinstance(rs, dict) else None
        if model_names and name is not None and name not in model_names:
            raise InputError(
                f"role {role!r} calls {name!r}, which is not in the models file"
                f"{did_you_mean(name, list(model_names))}",
                file=str(path),
                path=f"roles.{path_key(role)}.model",
                fix=f"use one of {list(model_names)}",
            )
    return spec


def _deep_merge(base: dict[str, object], over: dict[str, object]) -> dict[str, object]:
    out = dict(base)
    for k, v in over.items():
        b = base.get(k)
        out[k] = _deep_merge(b, v) if isinstance(v, dict) and isinstance(b, dict) else v
    return out


def _drop_roles(spec: dict[str, object], gone: list[str]) -> None:
    """Remove the roles a spec sets to null (`roles: {embed: null}`) and every reference to
    them: start and transition probabilities, the adopted and switching roles."""
    if not gone:
        return
    roles = spec.get("roles")
    if not isinstance(roles, dict):  # merged onto the default spec, whose roles are a mapping
        roles = {}
    for r in gone:
        roles.pop(r, None)
    starts = spec.get("start_role")
    transitions = spec.get("transitions")
    # each row of the transitions is a table of the same kind as the start probabilities
    rows = list(transitions.values()) if isinstance(transitions, dict) else []
    for table in [starts, transitions, *rows]:
        if isinstance(table, dict):
            for r in gone:
                table.pop(r, None)
    for key in ("adopted_role", "switch_role"):
        if spec.get(key) in gone:
            spec[key] = None
    if spec.get("switch_to_role") in gone:
        spec["switch_role"] = None  # no model left to switch to
        spec["switch_to_role"] = next(iter(roles), "")


def input_path(given: Path | None, plan: Plan | None, plan_path: Path | None, key: str) -> Path:
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
        highspy.Highs()  # type: ignore[no-untyped-call]  # highspy ships no types


def check_spec_size(spec: SynthSpec, file: str) -> None:
    """Refuse a spec whose expected request count passes MAX_SYNTH_REQUESTS (named in the error).

    Expected calls per turn: the visits of the role chain before `end`, from its start
    distribution and hand-off matrix (fundamental matrix of the absorbing chain), capped at
    `max_calls_per_turn`.
    """
    import numpy as np

    roles = list(spec.roles)
    start = np.array([spec.start_role.get(r, 0.0) for r in roles])
    hand = np.array([[spec.transitions.get(a, {}).get(b, 0.0) for b in roles] for a in roles])
    ends = np.array([spec.transitions.get(a, {}).get("end", 0.0) for a in roles])
    rows = hand.sum(axis=1) + ends
    hand = np.divide(hand, rows[:, None], out=np.zeros_like(hand), where=rows[:, None] > 0)
    calls: float
    try:
        visits = start / start.sum() @ np.linalg.inv(np.eye(len(roles)) - hand)
        calls = min(float(visits.sum()), spec.max_calls_per_turn)
    except np.linalg.LinAlgError:  # a chain that never ends: every turn runs to the cap
        calls = spec.max_calls_per_turn
    if not np.isfinite(calls) or calls < 0:
        calls = spec.max_calls_per_turn
    turns = spec.users * spec.days * spec.sessions_per_day * spec.turns_per_session
    expected = turns * calls
    if expected > MAX_SYNTH_REQUESTS:
        raise InputError(
            f"users x days x sessions_per_day x turns_per_session x {calls:.1f} calls per turn "
            f"is about {expected:,.0f} requests, over the limit of {MAX_SYNTH_REQUESTS:,} "
            "for a generated workload",
            file=file,
            path="users",
            fix="fewer users or days (a week of a team is enough to plan for)",
        )
