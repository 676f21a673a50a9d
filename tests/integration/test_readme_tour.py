"""The README's tour, as written, on a copy of the bundled examples (issue 15).

Every command of the README's `bash` blocks runs in a shell, from a folder that holds a copy
of `plans/examples/`, with `/tmp/cpu` moved into the test's own folder. The commands that
start vLLM servers or need a live state dir (apply, gateway, status/down, profile engine,
adjust --once) are left to the vLLM integration tests. Each must exit 0 without a traceback;
a few outputs are checked for what the README promises about them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Commands that start vLLM or act on a running one.
NEEDS_VLLM = ("planner apply", "planner gateway", "planner status", "planner profile engine")


def readme_commands() -> list[str]:
    """The `planner ...` commands of the README's bash blocks, continuation lines joined; of a
    set-up line (`python3 -m venv ... && pip install -e . && planner ...`), its planner part."""
    text = (ROOT / "README.md").read_text()
    cmds: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            cmds += [p.strip() for p in line.split("&&") if p.strip().startswith("planner ")]
    return cmds


def tour_commands() -> list[str]:
    """The README's commands that need no vLLM server, in order."""
    return [c for c in readme_commands() if not c.startswith(NEEDS_VLLM) and "--once" not in c]


def test_the_tour_has_the_commands_this_test_checks():
    cmds = tour_commands()
    for want in (
        "planner workload synth",
        "planner optimize",
        "planner plan show",
        "planner evaluate",
        "planner adjust --plan lab16.plan.yaml --replay",
        "planner adjust --plan lab16.plan.yaml --print-cron",
        "planner example cpu",
    ):
        assert any(c.startswith(want) for c in cmds), want


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Run the tour once; command -> its completed process."""
    work = tmp_path_factory.mktemp("tour")
    shutil.copytree(ROOT / "plans" / "examples", work / "plans" / "examples")
    cpu = work / "cpu"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("COLUMNS", None)
    done = {}
    for cmd in tour_commands():
        proc = subprocess.run(
            ["bash", "-c", cmd.replace("/tmp/cpu", str(cpu))],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        done[cmd] = proc
        assert proc.returncode == 0, f"{cmd}\nexit {proc.returncode}\n{proc.stderr[-3000:]}"
    return done


def _run(tour, prefix: str) -> subprocess.CompletedProcess:
    return next(p for c, p in tour.items() if c.startswith(prefix))


def test_every_tour_command_exits_0_without_a_traceback(tour):
    for cmd, proc in tour.items():
        assert "Traceback" not in proc.stderr + proc.stdout, cmd


def test_synth_follows_the_example_spec_without_remapping(tour):
    err = _run(tour, "planner workload synth").stderr
    assert "mapped onto" not in err and "is not in the models file" not in err


def test_optimize_and_plan_show_read_well_in_a_pipe(tour):
    out = _run(tour, "planner optimize -c plans").stdout
    assert "…" not in out and "e+" not in out
    assert re.search(r"\d+\.\d%", out), "attainment printed as a percentage"
    show = _run(tour, "planner plan show").stdout
    assert "…" not in show and "left out" not in show
    assert "GPU" in show and "weights" in show and "sleeping" in show


def test_evaluate_and_replay_say_how_they_score(tour):
    assert "one simulation of the whole trace" in _run(tour, "planner evaluate").stdout
    replay = json.loads(_run(tour, "planner adjust --plan lab16.plan.yaml --replay").stdout)
    assert "one continuous run per point in force" in replay["scoring"]


def test_print_cron_names_the_plan(tour):
    assert (
        "lab16.plan.yaml" in _run(tour, "planner adjust --plan lab16.plan.yaml --print-cron").stdout
    )
