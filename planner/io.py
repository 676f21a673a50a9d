"""File I/O shared by every command: YAML loading with located errors, atomic writes, hashes."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from planner.errors import InputError


def read_yaml(path: str | Path, kind: str | None = None) -> Any:
    """Parse a YAML file; an unreadable, empty or malformed file raises InputError.

    `kind` (when the caller knows it) names the schema the fix points to."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", file=str(p), fix="check the path") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read: {e.__class__.__name__}", file=str(p)) from None
    if not text.strip():
        raise InputError(
            "the file is empty", file=str(p), fix="write a YAML document starting with `kind:`"
        )
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(
            f"not valid YAML at {where}: {problem}",
            file=str(p),
            fix="the file may be truncated or mis-indented; compare with "
            + _schema_hint(kind or _kind_line(text)),
        ) from None
    if data is None:
        raise InputError("the file holds no YAML document", file=str(p))
    return data


def _kind_line(text: str) -> str | None:
    """The `kind:` of a file that does not parse, when its line is readable."""
    m = re.search(r"^kind:\s*([a-z]+)\s*$", text, re.MULTILINE)
    return m.group(1) if m else None


def _schema_hint(kind: str | None) -> str:
    if kind == "workload":
        return "`planner workload synth --print-spec`"
    if kind:
        return f"`planner schema {kind}`"
    return "`planner schema cluster` (or models, slo, plan, profile)"


def dump_yaml(data: Any) -> str:
    """YAML text with keys in the order given (plans read top-down)."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write UTF-8 text atomically (see atomic_write_bytes)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write via a temp file in the same directory and rename: readers see old or new, never half."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the file an ordinary mode
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (plan provenance)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
