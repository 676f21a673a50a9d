"""Help a newcomer can read (issue 15): at 80 columns and in a pipe, command lists keep each
description whole, and list-valued parameters have proper placeholders."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from planner.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def _help(args: list[str], columns: int | None) -> str:
    """`planner ARGS --help` in a child process, stdout a pipe (as `planner --help | less`)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = str(columns)
    proc = subprocess.run(
        [sys.executable, "-m", "planner.cli.main", *args, "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _commands(out: str) -> dict[str, str]:
    """Command name -> its description as the Commands section shows it (wrapped lines joined)."""
    rows: dict[str, str] = {}
    name = None
    for line in out.split("Commands:", 1)[1].splitlines():
        m = re.match(r"^  (\S+)\s+(.*)$", line)
        if m:
            name, rows[m.group(1)] = m.group(1), m.group(2)
        elif name and line.strip():
            rows[name] += " " + line.strip()
    return rows


@pytest.mark.parametrize("columns", [80, None])
@pytest.mark.parametrize("group", [[], ["workload"], ["profile"]])
def test_command_lists_keep_each_description_whole(group, columns):
    out = _help(group, columns)
    assert all(len(line) <= 80 for line in out.splitlines())
    cmd = typer.main.get_command(app)
    for name in group:
        cmd = cmd.commands[name]
    shown = _commands(out)
    assert set(shown) == {n for n, c in cmd.commands.items() if not c.hidden}
    for name, text in shown.items():
        assert not text.endswith("..."), (name, text)
        first = " ".join((cmd.commands[name].help or "").split("\n\n")[0].split())
        assert first.startswith(text.replace("- ", "-")) or text in first, (name, text)


def test_no_help_shows_a_python_type_as_placeholder():
    cmd = typer.main.get_command(app)

    def walk(c, path):
        yield path, c
        for n, sub in getattr(c, "commands", {}).items():
            yield from walk(sub, [*path, n])

    for path, c in walk(cmd, []):
        text = c.get_help(typer.core._click.Context(c, info_name=" ".join(["planner", *path])))
        assert "<list[" not in text and "<Path>" not in text, path
    validate = _help(["validate"], 80)
    assert re.search(r"^  FILE\.\.\.\s+Input files", validate, re.M)
    assert "--tp <int>" in _help(["profile", "engine"], 80)
    assert "--policy KEY=VALUE" in _help(["adjust"], 80)
