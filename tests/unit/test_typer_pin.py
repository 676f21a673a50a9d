"""`cli/helpfmt.py` overrides Typer internals, so pyproject pins Typer to the range it was
checked against. These tests fail on a Typer outside the pin or one whose internals
helpfmt relies on have moved or changed their signature (then re-check helpfmt and move
the pin)."""

from __future__ import annotations

import inspect
import tomllib
from importlib.metadata import version
from pathlib import Path

import typer
import typer.core
import typer.models
from packaging.requirements import Requirement
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_installed_typer_is_inside_the_pin():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (typer_req,) = [Requirement(d) for d in deps if Requirement(d).name == "typer"]
    assert "<" in str(typer_req.specifier), "helpfmt needs an upper bound on typer"
    assert version("typer") in typer_req.specifier, (version("typer"), str(typer_req))


def test_the_internals_helpfmt_overrides_keep_their_signatures():
    core = typer.core
    assert issubclass(core.TyperGroup, core.TyperCommand.__mro__[1])  # both click commands
    for cls in (core.TyperCommand, core.TyperGroup):
        assert _params(cls.format_options) == ["self", "ctx", "formatter"]
        assert _params(cls.get_params) == ["self", "ctx"]
        assert "limit" in _params(cls.get_short_help_str)
    assert _params(core.TyperGroup.format_commands) == ["self", "ctx", "formatter"]
    assert _params(core.TyperGroup.list_commands) == ["self", "ctx"]
    assert _params(core.TyperGroup.get_command) == ["self", "ctx", "cmd_name"]
    for param in (core.TyperArgument, core.TyperOption):
        assert _params(param.get_help_record) == ["self", "ctx"]
    assert core.TyperArgument.param_type_name == "argument"
    assert core.TyperOption.param_type_name == "option"
    formatter = core._click.HelpFormatter
    assert _params(formatter.section) == ["self", "name"]
    assert _params(formatter.write_dl)[:2] == ["self", "rows"]
    # use_help_classes rewrites the registry's `cls` before the click command is built
    assert "cls" in _params(typer.models.CommandInfo.__init__)
    assert {"cls", "typer_instance"} <= set(_params(typer.models.TyperInfo.__init__))


def test_plain_help_goes_through_the_overridden_hooks():
    """With rich_markup_mode=None Typer must lay help out through click's format_options /
    format_commands (a Typer that always renders with rich would skip helpfmt silently)."""
    from planner.cli.helpfmt import HelpGroup, use_help_classes

    app = typer.Typer(cls=HelpGroup, rich_markup_mode=None, add_completion=False)

    @app.command()
    def take(files: list[Path]) -> None:
        """A first sentence long enough that click would cut it short in a command list,
        which helpfmt keeps whole. More text."""

    @app.command()
    def other() -> None:
        """Another."""

    use_help_classes(app)
    root = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "helpfmt keeps whole." in root, root
    sub = CliRunner().invoke(app, ["take", "--help"], env={"COLUMNS": "200"}).output
    assert "files..." in sub and "<list[" not in sub, sub
