"""Type-check the package with mypy ([tool.mypy] of pyproject.toml: strict on planner.app,
the planner core and the modules that define the adjuster's and optimizer's Protocols).

pyproject maps the subpackages to top-level folders (planner.cli is cli/, ...), which mypy
cannot follow: it finds modules by folder, and the editable install's import hook is code it
does not run. So the package is laid out as a wheel would install it, as symbolic links under
.mypy_cache/tree (kept between runs, so mypy's incremental cache beside it stays valid), and
checked there; the paths it reports are mapped back to the checkout's.

    python scripts/typecheck.py     # exit 0: no error; 1: errors (listed);
                                    # 2: mypy is not installed (pip install -e '.[dev]')
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".mypy_cache"  # ignored by git (.gitignore)
TREE = CACHE / "tree"


def _link(link: Path, target: Path) -> None:
    """`link` -> `target`, replacing whatever `link` was."""
    if link.is_symlink() and link.readlink() == target:
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    link.symlink_to(target)


def lay_out() -> dict[str, str]:
    """The package under TREE as installed (`package-dir` of pyproject.toml), as links to the
    checkout's folders; returns each laid-out prefix ('planner/cli/') -> the checkout's ('cli/')."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    prefixes = {}
    for pkg, folder in dirs.items():
        laid = "/".join(pkg.split("."))
        if "." not in pkg:
            # the root package's folder holds the others: a real folder of links to its entries
            root = TREE / laid
            root.mkdir(parents=True, exist_ok=True)
            entries = {e.name: e for e in (ROOT / folder).iterdir() if e.name != "__pycache__"}
            subpackages = {p.split(".")[1] for p in dirs if p.count(".") == 1}
            for stale in root.iterdir():  # a module deleted or moved since the last run
                if stale.name not in entries and stale.name not in subpackages:
                    stale.unlink()
            for name, entry in entries.items():
                _link(root / name, entry)
        else:
            _link(TREE / laid, ROOT / folder)
        prefixes[laid + "/"] = folder + "/"
    return prefixes


def _checkout_path(line: str, prefixes: dict[str, str]) -> str:
    """A line of mypy's output with a laid-out path put back as the checkout's."""
    # longest first: planner/cli/ before planner/
    for laid in sorted(prefixes, key=len, reverse=True):
        if line.startswith(laid):
            return prefixes[laid] + line[len(laid) :]
    return line


def main() -> int:
    if importlib.util.find_spec("mypy") is None:
        print("mypy not found: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    prefixes = lay_out()
    config = ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(CACHE)]
    cmd = [sys.executable, "-m", "mypy", *config, "-p", "planner"]
    # run in the laid-out tree: mypy looks in its working directory first
    env = {**os.environ, "MYPY_FORCE_COLOR": "0"}
    proc = subprocess.run(cmd, cwd=TREE, env=env, capture_output=True, text=True, check=False)
    for line in (proc.stdout + proc.stderr).splitlines():
        print(_checkout_path(line, prefixes))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
