"""The init service (`planner init`): cluster.yaml, models.yaml and slo.yaml to start from.

With `--detect` the cluster describes this node as NVML sees it (GPUs mapped to catalog
types, their link, RAM); without a GPU it is the `cpu` node serving a tiny model, the
development path of docs/environment.md. Every file written validates with `planner validate`.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InputError
from planner.tinymodel import tiny_arch

if TYPE_CHECKING:
    from planner.profiler.devices import NodeInfo

_HEADER = {
    "cluster": "# Nodes and their GPUs. Edit names/addresses; `planner catalog gpus` lists GPU types.\n",
    "models": "# Models agents call. `planner catalog models` lists architectures; set each variant's path.\n",
    "slo": "# Latency targets (P95) and the share of requests that must meet them.\n",
}


def cluster_doc(node_info: Any | None) -> dict[str, Any]:
    """cluster.yaml data: the detected node, or the `cpu` node when there is no GPU."""
    from planner.profiler.devices import interconnect_of

    if node_info is None or not node_info.gpus:
        ram = round(node_info.ram_gib, 1) if node_info is not None else 16.0
        groups: list[dict[str, Any]] = [{"type": "cpu", "count": 1}]
    else:
        unknown = [g for g in node_info.gpus if g.gpu_type is None]
        if unknown:
            raise InputError(
                f"GPU {unknown[0].name!r} is not in the catalog",
                path="--detect",
                fix="write its spec inline in cluster.yaml (`planner schema cluster`), or run without --detect",
            )
        ram = round(node_info.ram_gib, 1)
        groups = []
        for t in node_info.gpu_types:
            mine = [g for g in node_info.gpus if g.gpu_type == t]
            groups.append(
                {
                    "type": t,
                    "count": len(mine),
                    "ids": [g.index for g in mine],
                    "interconnect": interconnect_of(mine),
                }
            )
    node = {
        "name": _node_name(node_info),
        "address": "localhost",
        "cpu_memory_gib": ram,
        "gpus": groups,
    }
    return {"kind": "cluster", "version": 1, "name": "local", "nodes": [node]}


def _node_name(node_info: Any | None) -> str:
    host = node_info.hostname if node_info is not None else platform.node()
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in host) or "node-0"


def models_doc(gpu: bool) -> dict[str, Any]:
    """models.yaml data: a 7B-class model on GPUs, the tiny model on the CPU."""
    if gpu:
        return {
            "kind": "models",
            "version": 1,
            "models": [
                {
                    "name": "assistant-7b",
                    "architecture": "Qwen2.5-7B-Instruct",
                    "variants": [
                        {
                            "name": "bf16",
                            "quantization": "bf16",
                            "path": "Qwen/Qwen2.5-7B-Instruct",
                        },
                        {
                            "name": "awq",
                            "quantization": "awq",
                            "path": "Qwen/Qwen2.5-7B-Instruct-AWQ",
                            "quality_penalty": 0.02,
                        },
                    ],
                    "max_context": 32768,
                    "priority": 1,
                }
            ],
        }
    return {
        "kind": "models",
        "version": 1,
        "models": [
            {
                "name": "tiny",
                "architecture": tiny_arch(),
                "variants": [{"name": "bf16", "quantization": "bf16", "path": "models/tiny"}],
                "max_context": 2048,
                "priority": 1,
            }
        ],
    }


def slo_doc(gpu: bool) -> dict[str, Any]:
    """slo.yaml data: interactive targets (looser on the CPU)."""
    d = (
        {"ttft_p95_s": 2.0, "tpot_p95_s": 0.1, "switch_p95_s": 10.0}
        if gpu
        else {"ttft_p95_s": 5.0, "tpot_p95_s": 0.5, "switch_p95_s": 60.0}
    )
    return {"kind": "slo", "version": 1, "default": d, "models": {}, "attainment": 0.99}


def write_inputs(out: Path, node_info: Any | None, *, force: bool) -> list[Path]:
    """Validate then write the three files into `out`; existing files need `force`."""
    from planner.io import atomic_write_text, dump_yaml
    from planner.schemas import parse

    gpu = node_info is not None and bool(node_info.gpus)
    docs = {"cluster": cluster_doc(node_info), "models": models_doc(gpu), "slo": slo_doc(gpu)}
    paths = {k: out / f"{k}.yaml" for k in docs}
    if not force:
        present = [str(p) for p in paths.values() if p.exists()]
        if present:
            raise InputError(
                f"{present[0]} exists", path="-o", fix="pass --force to overwrite, or another -o"
            )
    for kind, data in docs.items():
        parse(data, kind, str(paths[kind]))  # never write a file `validate` would reject
    for kind, data in docs.items():
        atomic_write_text(paths[kind], _HEADER[kind] + dump_yaml(data))
    return list(paths.values())


@dataclass(frozen=True)
class Initialized:
    """The files written and, with `--detect`, this node as NVML saw it."""

    paths: list[Path]
    node: NodeInfo | None


def init(out: Path, *, detect: bool = False, force: bool = False) -> Initialized:
    """Write cluster.yaml, models.yaml and slo.yaml into `out` (with `detect`, the cluster
    describes this node)."""
    node_info = None
    if detect:
        from planner.profiler.devices import discover_node

        out.mkdir(parents=True, exist_ok=True)
        node_info = discover_node(disk_path=out)
    return Initialized(write_inputs(out, node_info, force=force), node_info)
