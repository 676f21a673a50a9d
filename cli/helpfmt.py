"""How `planner ... --help` lays out: readable at 80 columns and in a pipe.

Click cuts each command's one-line description in a command list to what fits beside the
name (`Memory per GPU, KV capacity, TTFT/TPOT at a concurrency, and...`); here the first
sentence is kept whole and wrapped under itself. Arguments that take several values show
`FILE...` rather than Typer's `FILE <list[Path]>`, repeatable options their element type.
"""

from __future__ import annotations

import re
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

_LIST_TYPE = re.compile(r" <list\[([^\]]*)\]>")


def _format_params(cmd: Any, ctx: Any, formatter: Any) -> None:
    """Arguments and options as Typer lists them; a list type shown as `NAME...` on an
    argument and as its element type on a (repeatable) option: `--tp <int>`."""
    rows: dict[str, list[tuple[str, str]]] = {"argument": [], "option": []}
    for param in cmd.get_params(ctx):
        rec = param.get_help_record(ctx)
        if rec is not None and param.param_type_name in rows:
            kind = param.param_type_name
            each = "..." if kind == "argument" else r" <\1>"
            rows[kind].append((_LIST_TYPE.sub(each, rec[0]).replace("<Path>", "<path>"), rec[1]))
    for title, key in (("Arguments", "argument"), ("Options", "option")):
        if rows[key]:
            with formatter.section(title):
                formatter.write_dl(rows[key])


class HelpCommand(TyperCommand):
    """A command whose help shows list arguments as `NAME...`."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _format_params(self, ctx, formatter)


class HelpGroup(TyperGroup):
    """A group whose command list keeps each first sentence whole, wrapped."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _format_params(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))  # the first sentence
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def use_help_classes(app: typer.Typer) -> None:
    """Give every group and command of `app` (registered so far) the classes above."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand) or not isinstance(info.cls, type):
            info.cls = HelpCommand
    for group in app.registered_groups:
        if group.cls in (None, TyperGroup) or not isinstance(group.cls, type):
            group.cls = HelpGroup
        if group.typer_instance is not None:
            use_help_classes(group.typer_instance)
