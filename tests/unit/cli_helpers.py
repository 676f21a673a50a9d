"""The CLI in process, as the unit tests call it: exit code, stdout and stderr."""

from __future__ import annotations

import pytest

from planner.cli.main import main

# what `planner evaluate --json` and `planner adjust replay` report for one point
METRIC_KEYS = frozenset(
    {
        "slo_attainment",
        "ttft_p95_s",
        "tpot_p95_s",
        "switch_p95_s",
        "switch_count",
        "warm_gpu_gib",
        "gpus_used",
        "requests",
        "refused",
        "substituted_share",
        "quality_cost",
    }
)


def run_cli(args: list, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """Run `planner ARGS` (every command ends in SystemExit) and read what it printed."""
    with pytest.raises(SystemExit) as ei:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return int(ei.value.code or 0), out, err


def run_cli_one_line(args: list, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """As run_cli, with stderr's lines (wrapped by the terminal width) joined into one."""
    code, out, err = run_cli(args, capsys)
    return code, out, " ".join(err.split())
