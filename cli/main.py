"""The `planner` command: the only place that reads argv, prints errors and picks exit codes."""

from __future__ import annotations

import importlib
import sys

import typer

from planner import __version__
from planner.cli.common import err_console, print_error, print_json
from planner.cli.helpfmt import HelpGroup, use_help_classes
from planner.errors import PlannerError

app = typer.Typer(
    name="planner",
    cls=HelpGroup,
    help="Plan, apply and adjust where a small team's LLMs live on a small mixed GPU cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# Each module adds its commands with `register(app)`; heavy imports stay inside commands.
_COMMAND_MODULES = [
    "validate",
    "catalog",
    "estimate",
    "workload",
    "evaluate",
    "optimize",
    "explain",
    "plan",
    "profile",
    "init",
    "example",
    "apply",
    "state",
    "history",
    "gateway",
    "keys",
    "adjust",
]


@app.callback(invoke_without_command=True)
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)


for _name in _COMMAND_MODULES:
    importlib.import_module(f"planner.cli.{_name}").register(app)
use_help_classes(app)


def error_json(e: PlannerError) -> dict:
    """A domain error as `--json` prints it: message, kind, exit code, and where it applies."""
    out = {"message": e.message, "type": type(e).__name__, "exit_code": e.exit_code}
    for k in ("file", "path", "fix", "reason"):
        v = getattr(e, k, None)
        if v:
            out[k] = v
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turn domain errors into a message and an exit code.

    Usage errors are the CLI framework's own (printed with the usage line, exit 2); domain
    errors propagate out of it and are printed here as one message plus a fix.
    """
    args = sys.argv[1:] if argv is None else argv
    try:
        app(args=argv, prog_name="planner")
    except PlannerError as e:
        print_error(str(e))
        if "--json" in args:  # scripts read stdout: the error as JSON there too
            print_json({"error": error_json(e)})
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
