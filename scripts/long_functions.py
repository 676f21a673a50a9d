"""Functions longer than a limit in the package's folders (issue 27: a rule should stay well
under 80 lines). Prints them, longest first, then `RESULT functions_over_<limit>=N`.

    python scripts/long_functions.py [--limit 80] [--max N]   # --max: exit 1 above N
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def long_functions(limit: int) -> list[tuple[int, str]]:
    """(lines, 'file:line name') of every function over `limit` lines, longest first."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    rows = []
    for folder in sorted(set(dirs.values())):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    n = node.end_lineno - node.lineno + 1
                    if n > limit:
                        rows.append((n, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return sorted(rows, reverse=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--max", type=int, default=None, help="exit 1 when more functions are long")
    args = ap.parse_args()
    rows = long_functions(args.limit)
    for n, where in rows:
        print(f"{n:4d} {where}")
    print(f"RESULT functions_over_{args.limit}={len(rows)}")
    return 1 if args.max is not None and len(rows) > args.max else 0


if __name__ == "__main__":
    sys.exit(main())
