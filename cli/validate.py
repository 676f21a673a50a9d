"""`planner validate FILE...` and `planner schema KIND` (`planner.app.validate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from planner.app.validate import KINDS
from planner.cli.common import JsonOpt, console, print_error, print_json


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
            str | None, typer.Option("--kind", help=f"Force the kind: {', '.join(KINDS)}.")
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
        from planner.app.validate import validate as service

        results = service(files, kind, models_file, cluster_file)
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
        kind: Annotated[str, typer.Argument(metavar="KIND", help=f"One of {', '.join(KINDS)}.")],
    ) -> None:
        """Print the JSON Schema of a file kind."""
        from planner.app.validate import json_schema

        print_json(json_schema(kind))
