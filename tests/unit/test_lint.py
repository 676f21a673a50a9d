"""The readability rules of CONTRIBUTING.md, enforced: ruff's lint (complexity, nesting,
branches, statements, returns and arguments with the thresholds in pyproject.toml) and its
formatter, over the whole repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("ruff")  # the dev extra installs it
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def test_ruff_check_is_clean_with_the_complexity_rules():
    out = _ruff("check", "--output-format", "concise")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_formatter_lays_out_every_file():
    out = _ruff("format", "--check")
    assert out.returncode == 0, out.stdout + out.stderr
