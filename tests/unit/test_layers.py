"""The layering of docs/architecture.md, enforced: import-linter's contracts (pyproject.toml
[tool.importlinter], run by scripts/lint_imports.py) and no import cycle between modules."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# An import under `if TYPE_CHECKING:` or inside a function counts: it ties the modules as much.


def _modules() -> dict[str, Path]:
    """Module name -> file, for every module of the package (as pyproject maps the folders)."""
    out: dict[str, Path] = {}
    for pkg, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.setdefault(".".join((pkg, *parts)), path)
    return out


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in its file)."""

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            edges[mod] |= {t for n in names if (t := known(n)) and t != mod}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_no_import_cycle():
    found = _cycles(_graph(_modules()))
    assert not found, f"import cycles between modules: {sorted(map(sorted, found))}"


def test_the_cycle_check_sees_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [frozenset({"a", "b", "c"})]


def test_core_contract_names_every_core_module():
    """A new module of planner/ falls under the core contract (pyproject lists them)."""
    (core,) = [
        c
        for c in PYPROJECT["tool"]["importlinter"]["contracts"]
        if c["name"].startswith("planner core")
    ]
    here = {
        f"planner.{p.stem if p.suffix == '.py' else p.name}"
        for p in (ROOT / "planner").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert set(core["source_modules"]) == here | {"planner.examples"}


@pytest.mark.skipif(
    importlib.util.find_spec("importlinter") is None,
    reason="import-linter is not installed (pip install -e '.[dev]')",
)
def test_import_contracts_hold():
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lint_imports.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def _cli_imports(path: Path) -> list[str]:
    """The `planner.cli` modules a file imports (anywhere in it), by line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        out += [
            f"{path.name}:{node.lineno} {n}"
            for n in names
            if n.split(".")[:2] == ["planner", "cli"]
        ]
    return out


def test_benches_call_the_app_layer_not_the_cli():
    """The benches call the same services as the CLI (planner.app), never the CLI's modules:
    a bench that runs the CLI does so as a user does, in a subprocess."""
    found = [hit for p in sorted((ROOT / "bench").rglob("*.py")) for hit in _cli_imports(p)]
    assert found == []


def test_the_bench_check_sees_a_cli_import(tmp_path):
    p = tmp_path / "b.py"
    p.write_text("import os\nfrom planner.cli import inputs\nimport planner.cli.main as m\n")
    assert _cli_imports(p) == ["b.py:2 planner.cli", "b.py:3 planner.cli.main"]
