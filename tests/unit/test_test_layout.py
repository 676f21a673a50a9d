"""The tests share their fakes through conftest.py and named helper modules, never by importing
another test module: a test module imported elsewhere ties unrelated files together, runs its
module-level code for every importer, and hides what is shared."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imports_of_test_modules(source: str, name: str) -> list[str]:
    """`name:line module` for each import of a `test_*` module in `source`, at any depth."""
    found = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module]
        else:
            continue
        found += [(node.lineno, m) for m in modules if m.split(".")[-1].startswith("test_")]
    return [f"{name}:{line} {m}" for line, m in sorted(found)]  # ast.walk is breadth-first


def test_no_file_under_tests_imports_a_test_module():
    files = sorted(TESTS.rglob("*.py"))
    assert any(p.name == "test_gateway.py" for p in files)  # the scan sees the tests
    found = [
        hit
        for p in files
        for hit in imports_of_test_modules(p.read_text(), str(p.relative_to(TESTS)))
    ]
    assert found == [], "share through conftest.py or a helper module: " + ", ".join(found)


def test_the_scan_finds_every_form_of_import_of_a_test_module():
    source = (
        "import test_a\n"
        "from test_b import x\n"
        "import pkg.test_c as c\n"
        "def f():\n"
        "    from test_d import y\n"
        "import testing, tests_helpers\n"
        "from gateway_fakes import inst\n"
    )
    hits = imports_of_test_modules(source, "probe.py")
    assert hits == [
        "probe.py:1 test_a",
        "probe.py:2 test_b",
        "probe.py:3 pkg.test_c",
        "probe.py:5 test_d",
    ]
