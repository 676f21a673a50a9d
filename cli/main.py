"""The `planner` command: the only place that reads argv, prints errors and picks exit codes."""

from __future__ import annotations

import importlib
import sys

import typer

from planner import __version__
from planner.cli.common import err_console, print_error
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


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turn domain errors into a message and an exit code.

    Usage errors are the CLI framework's own (printed with the usage line, exit 2); domain
    errors propagate out of it and are printed here as one message plus a fix.
    """
    try:
        app(args=argv, prog_name="planner")
    except PlannerError as e:
        print_error(str(e))
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
