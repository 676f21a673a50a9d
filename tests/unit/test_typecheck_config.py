"""The type checker's configuration stays whole: every module that other code leans on for its
types (planner.app, the planner core, every module defining a Protocol in the adjuster and the
optimizer) is under the strict flags of pyproject.toml [tool.mypy], and scripts/test.sh (what
CI runs) type-checks before the unit tests and fails when the checker does. The check itself
runs in scripts/test.sh, once (scripts/typecheck.py), not here."""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _modules() -> dict[str, Path]:
    """Module name -> file, for every module of the package (as pyproject maps the folders)."""
    out: dict[str, Path] = {}
    for pkg, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if "__pycache__" in parts or not (path.parent / "__init__.py").exists():
                continue  # not a package's module (planner/engine_site/: a server start-up hook)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.setdefault(".".join((pkg, *parts)), path)
    return out


def _matches(module: str, patterns: list[str]) -> bool:
    """Whether a mypy override's `module` list covers `module` (`a.b.*` covers a.b's
    submodules, not a.b itself)."""
    return any(module == p or (p.endswith(".*") and module.startswith(p[:-1])) for p in patterns)


def _strict_patterns() -> list[str]:
    """The module patterns of the override that turns the strict flags on."""
    (strict,) = [
        o for o in PYPROJECT["tool"]["mypy"]["overrides"] if o.get("disallow_untyped_defs")
    ]
    # every flag of `mypy --strict` that can be set per module, not `strict = true`: in an
    # override that one turns them on for every module (python/mypy#11401)
    flags = (
        "disallow_any_generics",
        "disallow_subclassing_any",
        "disallow_untyped_calls",
        "disallow_untyped_defs",
        "disallow_incomplete_defs",
        "check_untyped_defs",
        "disallow_untyped_decorators",
        "warn_unused_ignores",
        "warn_return_any",
        "strict_equality",
        "extra_checks",
    )
    assert all(strict.get(f) is True for f in flags) and strict.get("implicit_reexport") is False
    assert "strict" not in strict
    return list(strict["module"])


def _defines_protocol(path: Path) -> bool:
    """Whether the file defines a typing.Protocol class (not asyncio's)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id == "Protocol":
                    return True
    return False


def test_strict_covers_app_the_core_and_every_protocol_module():
    strict = _strict_patterns()
    mods = _modules()
    wanted = [
        m
        for m, path in mods.items()
        if m == "planner"
        or m.startswith("planner.app")
        or path.parent.relative_to(ROOT).parts[:1] == ("planner",)
        or (m.startswith(("planner.adjuster", "planner.optimizer")) and _defines_protocol(path))
    ]
    assert "planner.adjuster.reoptimize_policy" in wanted  # the check sees a Protocol module
    assert "planner.optimizer.search_context" in wanted
    missing = [m for m in wanted if not _matches(m, strict)]
    assert not missing, f"add to the strict override of [tool.mypy] in pyproject.toml: {missing}"
    ignored = [o for o in PYPROJECT["tool"]["mypy"]["overrides"] if o.get("ignore_errors")]
    relaxed = [m for o in ignored for m in o["module"] if _matches(m, strict)]
    assert not relaxed, f"strict modules whose errors are ignored: {relaxed}"


def test_the_strict_match_sees_a_module_left_out():
    assert _matches("planner.schemas.plan", ["planner.schemas.*"])
    assert not _matches("planner.schemas", ["planner.schemas.*"])
    assert not _matches("planner.adjuster.live", ["planner.adjuster.backends.base"])


def test_ci_type_checks_before_the_unit_tests_and_fails_with_it():
    script = (ROOT / "scripts" / "test.sh").read_text()
    check = script.index("python scripts/typecheck.py || types=$?")
    assert check < script.index("python -m pytest -q tests/unit ||")
    last = script.rstrip().splitlines()[-1]
    assert re.search(r'\[ "\$types" -eq 0 \]', last), last


def test_reported_paths_are_the_checkouts():
    spec = importlib.util.spec_from_file_location("typecheck", ROOT / "scripts" / "typecheck.py")
    assert spec is not None and spec.loader is not None
    typecheck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(typecheck)
    prefixes = {"planner/": "planner/", "planner/cli/": "cli/", "planner/adjuster/": "adjuster/"}
    line = "planner/adjuster/live.py:12: error: ..."
    assert typecheck._checkout_path(line, prefixes) == "adjuster/live.py:12: error: ..."
    assert typecheck._checkout_path("planner/io.py:3: x", prefixes) == "planner/io.py:3: x"
    assert typecheck._checkout_path("Success: no issues", prefixes) == "Success: no issues"
