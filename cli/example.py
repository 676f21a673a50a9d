"""`planner example NAME -o DIR`: write a ready-to-use set of input files
(`planner.app.example`, which says what each example holds)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, console, err_console, print_json, require_extra


def example_cmd(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="cpu or lab16 (a folder of plans/examples/).")
    ],
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory to write into.")],
    no_models: Annotated[
        bool, typer.Option("--no-models", help="cpu: skip building the tiny models.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Write an example cluster/models/slo set (cpu: with tiny models vLLM-CPU can serve)."""
    from planner.app.example import write_example

    if name == "cpu" and not no_models:  # checked before anything is written
        modules = ("torch", "transformers", "tokenizers")
        require_extra("serve-cpu", "`planner example cpu` (building its tiny models)", modules)
    if name == "cpu" and not (json_out or no_models):
        with err_console.status("building the tiny models ..."):
            written = write_example(name, out)
    else:
        written = write_example(name, out, build_models=not no_models)
    if json_out:
        print_json({"example": name, "dir": str(out), "files": [str(p) for p in written]})
    else:
        for p in written:
            console.print(f"wrote {p}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("example")(example_cmd)
