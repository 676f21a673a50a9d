"""Check the import contracts of pyproject.toml ([tool.importlinter]) with import-linter.

pyproject maps the subpackages to top-level folders (planner.cli is cli/, ...), while
import-linter reads a package from one folder tree. So the package is laid out in a
temporary folder as a wheel would install it (Python files only), and linted there.

    python scripts/lint_imports.py        # exit 0: every contract kept; 1: one is broken;
                                          # 2: import-linter is not installed (pip install -e .[dev])
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _python_only(folder: str, names: list[str]) -> set[str]:
    """copytree's ignore: everything but .py files and sub-folders (caches too)."""
    return {
        n
        for n in names
        if n == "__pycache__" or (not n.endswith(".py") and not Path(folder, n).is_dir())
    }


def lay_out(dest: Path) -> None:
    """The package's modules under `dest` as installed (`package-dir` of pyproject.toml)."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for pkg, folder in sorted(dirs.items(), key=lambda kv: kv[0].count(".")):
        target = dest.joinpath(*pkg.split("."))
        shutil.copytree(ROOT / folder, target, ignore=_python_only, dirs_exist_ok=True)


def main() -> int:
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists() and shutil.which("lint-imports") is None:
        print("lint-imports not found: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    cmd = [str(exe) if exe.exists() else "lint-imports", str(ROOT / "pyproject.toml")]
    with tempfile.TemporaryDirectory() as tmp:
        lay_out(Path(tmp))
        # lint-imports puts its working directory first on sys.path: the copy, not the checkout
        return subprocess.run(cmd, cwd=tmp, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
