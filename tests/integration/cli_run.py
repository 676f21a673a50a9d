"""Run the `planner` CLI in-process, as the integration tests do."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from planner.cli.main import main


def cli(args: list[str]) -> tuple[int, dict | None, str]:
    """Run the CLI in-process; (exit code, parsed JSON stdout or None, stderr + stdout)."""
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit) as ei,
    ):
        main(args)
    text = out.getvalue()
    data = json.loads(text) if text.lstrip().startswith("{") else None
    return int(ei.value.code or 0), data, err.getvalue() + text
