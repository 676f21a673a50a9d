"""`planner keys add|list|remove`: the gateway's keys file (`planner gateway --keys FILE`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import JsonOpt, console, err_console, print_json

FileOpt = Annotated[
    Path,
    typer.Option("--file", "-f", help="The keys file (written 0600; made when missing)."),
]
_DEFAULT = Path("keys.yaml")

app = typer.Typer(
    help="Make, list and remove the gateway's keys (`planner gateway --keys FILE`).",
    no_args_is_help=True,
)


@app.command("add")
def add_cmd(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Who holds it: a user or a team.")],
    models: Annotated[
        list[str] | None,
        typer.Option(
            "--models", metavar="MODEL", help="Models it may call (repeat, or a,b; default all)."
        ),
    ] = None,
    admin: Annotated[
        bool, typer.Option("--admin", help="May read /metrics and the detailed /health.")
    ] = False,
    trusted_proxy: Annotated[
        bool,
        typer.Option(
            "--trusted-proxy", help="A front end whose X-User header names its own users."
        ),
    ] = False,
    max_concurrency: Annotated[
        int | None,
        typer.Option("--max-concurrency", min=1, help="Most requests in flight at once."),
    ] = None,
    rpm: Annotated[
        int | None, typer.Option("--rpm", min=1, help="Most requests in any 60 s.")
    ] = None,
    file: FileOpt = _DEFAULT,
) -> None:
    """Make a new random key for NAME: print it once, store only its salted hash."""
    from planner.keys import add_key

    names = [m for v in models or () for m in v.split(",") if m]
    key = add_key(
        file,
        name,
        models=names,
        admin=admin,
        trusted_proxy=trusted_proxy,
        max_concurrency=max_concurrency,
        requests_per_minute=rpm,
    )
    err_console.print(
        f"key for {name!r} added to {file} (only its hash is stored; this is the one time it "
        "is shown). A running gateway takes it within a second (or on SIGHUP).",
        highlight=False,
    )
    typer.echo(key)  # stdout: the key alone, for `KEY=$(planner keys add ...)`


@app.command("list")
def list_cmd(file: FileOpt = _DEFAULT, json_out: JsonOpt = False) -> None:
    """The keys of the file: names, models, limits (never the keys)."""
    from planner.keys import read_keys

    keys = read_keys(file)
    rows = [k.model_dump(exclude={"hash"}) for k in keys.keys]
    if json_out:
        print_json(rows)
        return
    from rich.table import Table

    t = Table("name", "models", "rpm", "max concurrency", "admin", "trusted proxy")
    for r in rows:
        t.add_row(
            r["name"],
            ", ".join(r["models"]) if r["models"] else "all",
            str(r["requests_per_minute"] or "-"),
            str(r["max_concurrency"] or "-"),
            "yes" if r["admin"] else "",
            "yes" if r["trusted_proxy"] else "",
        )
    console.print(t)


@app.command("remove")
def remove_cmd(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The key's name.")],
    file: FileOpt = _DEFAULT,
) -> None:
    """Remove NAME's key; a running gateway refuses it within a second (or on SIGHUP)."""
    from planner.keys import remove_key

    remove_key(file, name)
    err_console.print(f"key {name!r} removed from {file}", highlight=False)


def register(root: typer.Typer) -> None:
    """Add `planner keys ...`."""
    root.add_typer(app, name="keys")
