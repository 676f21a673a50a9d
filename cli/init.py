"""`planner init`: cluster.yaml, models.yaml and slo.yaml to start from (`planner.app.init`,
which says what each holds)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, console, print_json


def init_cmd(
    detect: Annotated[
        bool, typer.Option("--detect", help="Describe this node's GPUs, RAM and disk.")
    ] = False,
    out: Annotated[
        Path, typer.Option("-o", "--out", help="Directory to write the three files into.")
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Write cluster.yaml, models.yaml and slo.yaml to start from."""
    from planner.app.init import init

    done = init(out, detect=detect, force=force)
    node_info = done.node
    if json_out:
        print_json(
            {
                "written": [str(p) for p in done.paths],
                "gpus": [g.__dict__ for g in node_info.gpus] if node_info else [],
            }
        )
        return
    if node_info is not None:
        if node_info.gpus:
            for g in node_info.gpus:
                console.print(
                    f"GPU {g.index}: {g.name} -> {g.gpu_type}, {g.memory_gib:.1f} GiB, "
                    f"PCIe gen {g.pcie_gen} x{g.pcie_width}, NVLink links {g.nvlink_links}"
                )
        else:
            console.print("no NVIDIA GPU found: wrote the `cpu` node (vLLM CPU build)")
        console.print(
            f"RAM {node_info.ram_gib:.1f} GiB, disk free {node_info.disk_free_gib:.1f} GiB"
        )
    for p in done.paths:
        console.print(f"wrote {p}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("init")(init_cmd)
