"""plan.yaml as a person reads it (docs/plan-format.md).

A header comment says what wrote the file, from which inputs (with their hashes) and how to
apply it; then `selected` and `points` (each instance with its GPU type, and `shares_gpu_with`
where instances time-share a GPU); then the workload summary and the provenance (`inputs`,
`search`). Comments are ignored on load, and plans written before this layout load as before
(the two instance fields default to empty).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from planner import __version__
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Plan

# Top-level keys in reading order; keys not named here follow in schema order.
_FIRST = ("kind", "version", "selected", "points")
_LAST = ("workload_summary", "inputs", "calibration", "search")


def annotate(plan: Plan, cluster: Cluster | None) -> Plan:
    """A copy of `plan` with each instance's `gpu_type` (from `cluster`) and `shares_gpu_with`."""
    types = (
        {(n.name, idx): g.spec.name for n in cluster.nodes for idx, g in n.gpu_list()}
        if cluster is not None
        else {}
    )
    points = []
    for p in plan.points:
        instances = []
        for inst in p.instances:
            mine = {(inst.node, g) for g in inst.gpus}
            shares = [
                o.id
                for o in p.instances
                if o.id != inst.id and mine & {(o.node, g) for g in o.gpus}
            ]
            found = {types[k] for k in sorted(mine) if k in types}
            gpu_type = "+".join(sorted(found)) if found else inst.gpu_type
            instances.append(
                inst.model_copy(update={"gpu_type": gpu_type, "shares_gpu_with": shares})
            )
        points.append(p.model_copy(update={"instances": instances}))
    return plan.model_copy(update={"points": points})


def plan_text(plan: Plan) -> str:
    """The plan file's text: header comment, then the YAML in reading order."""
    data = plan.model_dump(mode="json")
    ordered = {k: data[k] for k in _FIRST if k in data}
    ordered |= {k: v for k, v in data.items() if k not in _FIRST and k not in _LAST}
    ordered |= {k: data[k] for k in _LAST if k in data}
    if not ordered.get("calibration"):
        ordered.pop("calibration", None)  # spec-sheet factors: nothing to record
    for point in ordered["points"]:
        for inst in point["instances"]:
            if not inst.get("shares_gpu_with"):
                inst.pop("shares_gpu_with", None)
            for key in ("memory_gib", "engine"):
                if key in inst:
                    inst[key] = _Flow(inst[key])
    body: str = yaml.dump(
        ordered, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=100
    )
    return _header(plan) + body


def write_plan(path: str | Path, plan: Plan, cluster: Cluster | None = None) -> Plan:
    """Annotate `plan` from `cluster` and write it atomically to `path`; returns what was written."""
    from planner.io import atomic_write_text

    plan = annotate(plan, cluster)
    atomic_write_text(path, plan_text(plan))
    return plan


def _header(plan: Plan) -> str:
    names = ", ".join(f"{p.name}*" if p.name == plan.selected else p.name for p in plan.points)
    lines = [
        f"plan written by planner {__version__}: {len(plan.points)} Pareto points ({names};",
        "* selected: the point `planner apply` uses unless --point names another).",
    ]
    if plan.inputs:
        lines.append("Inputs (sha256; full paths and hashes under `inputs:` below):")
        width = max(len(k) for k in plan.inputs)
        lines += [
            f"  {k:<{width}}  {ref.sha256[:12] or '-':<12}  {ref.path or '-'}"
            for k, ref in plan.inputs.items()
        ]
    lines += [
        "Apply:  planner apply THIS_FILE [--point NAME] [--dry-run]",
        "Read:   planner plan show THIS_FILE [--point NAME]   (memory per GPU)",
        "        planner explain THIS_FILE                    (why each model sits where)",
        "Layout: selected; points (per instance: node, gpu_type, gpus, tier gpu|host|disk;",
        "        shares_gpu_with: the other instances on its GPUs; awake ones split the memory,",
        "        sleeping ones time-share it: waking one sleeps its co-tenants first);",
        "        workload_summary (what the plan was optimized for: the drift reference);",
        "        inputs and search (provenance). Format: docs/plan-format.md.",
    ]
    return "".join(f"# {line}".rstrip() + "\n" for line in lines)


class _Flow(dict[str, Any]):
    """A mapping written on one line (wrapped at the width): engine args, memory."""


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]  # yaml has no type information here
    pass


def _flow(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True)


_Dumper.add_representer(_Flow, _flow)
