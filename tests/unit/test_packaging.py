"""The package map in pyproject.toml matches the folders; the CLI starts without heavy imports."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "planner": "planner",
    "cli": "planner.cli",
    "profiler": "planner.profiler",
    "optimizer": "planner.optimizer",
    "app": "planner.app",
    "adjuster": "planner.adjuster",
    "plans/examples": "planner.examples",
}


def test_every_package_folder_is_listed():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = set()
    for folder, pkg in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((pkg, *rel)))
    assert found == listed


def test_help_imports_no_torch_vllm_or_ray():
    code = (
        "import sys; from planner.cli.main import app; "
        "print(sorted(m for m in ('torch', 'vllm', 'ray', 'matplotlib', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    help_out = subprocess.run(
        [sys.executable, "-m", "planner.cli.main", "--help"], capture_output=True, text=True
    )
    assert help_out.returncode == 0 and "optimize" in help_out.stdout


def test_a_gateway_over_a_plan_imports_no_pandas(tmp_path):
    # Only `adjust` reads the request log as a data frame; pandas (with pyarrow) was half of
    # the gateway process's memory: `planner gateway` on this plan, 147 -> 78 MiB RSS.
    code = (
        "import sys; from pathlib import Path; from planner.app.gateway import open_gateway; "
        "import planner.adjuster.gateway.run; "
        f"open_gateway(Path('tests/golden/plan_small.yaml'), state_dir=Path({str(tmp_path)!r}), "
        "insecure=True); print(sorted(m for m in ('pandas', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
