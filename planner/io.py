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

# libyaml's parser where PyYAML was built with it (about 10x faster); same results.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_YAML_BYTES = 16 * 1024 * 1024  # an input YAML larger than this is refused, bytes
MAX_YAML_DEPTH = 64  # deepest nesting of mappings and lists an input may have
MAX_YAML_NODES = 2_000_000  # values in a document, aliases expanded (an alias bomb stops here)


def read_yaml(path: str | Path, kind: str | None = None) -> Any:
    """Parse a YAML file; an unreadable, empty, oversized or malformed file raises InputError.

    `kind` (when the caller knows it) names the schema the fix points to."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_YAML_BYTES:
            raise InputError(
                f"the file is {size / 2**20:.1f} MiB, over the {MAX_YAML_BYTES >> 20} MiB limit "
                "on input YAML files",
                file=str(p),
                fix="input files are small: check that this is the file you meant",
            )
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", file=str(p), fix="check the path") from None
    except UnicodeDecodeError as e:
        raise InputError(
            f"not UTF-8 text (byte {e.start})", file=str(p), fix="save the file as UTF-8"
        ) from None
    except OSError as e:
        raise InputError(
            f"cannot read: {e.strerror or e.__class__.__name__}", file=str(p)
        ) from None
    return parse_yaml(text, str(p), kind)


def parse_yaml(text: str, file: str, kind: str | None = None) -> Any:
    """Parse YAML text read from `file` (named in errors); see read_yaml."""
    if not text.strip():
        raise InputError(
            "the file is empty", file=file, fix="write a YAML document starting with `kind:`"
        )
    try:
        data = yaml.load(text, Loader=_LOADER)  # a safe loader: C or Python
    except RecursionError:  # the pure-Python parser on deep nesting
        raise _too_deep(file) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        pos = getattr(e, "position", None)  # a reader error: a character YAML does not allow
        if mark is not None:
            where = f"line {mark.line + 1}, column {mark.column + 1}"
        elif isinstance(pos, int):
            line = text.count("\n", 0, pos) + 1
            where = f"line {line}, column {pos - text.rfind(chr(10), 0, pos)}"
        else:
            where = "somewhere"
        problem = (
            getattr(e, "problem", None)
            or (f"character {e.character!r}: {e.reason}" if isinstance(pos, int) else None)
            or str(e).splitlines()[0]
        )
        raise InputError(
            f"not valid YAML at {where}: {problem}",
            file=file,
            fix="the file may be truncated or mis-indented; compare with "
            + _schema_hint(kind or _kind_line(text)),
        ) from None
    if data is None:
        raise InputError("the file holds no YAML document", file=file)
    _check_shape(data, file)
    return data


def _too_deep(file: str) -> InputError:
    return InputError(
        f"nested more than {MAX_YAML_DEPTH} levels deep (the limit on input YAML)",
        file=file,
        fix="input files nest a few levels; check the indentation and brackets",
    )


def _check_shape(data: Any, file: str) -> None:
    """Refuse documents nested deeper than MAX_YAML_DEPTH or with over MAX_YAML_NODES values."""
    stack = [(data, 1)]
    seen = 0
    while stack:
        obj, depth = stack.pop()
        seen += 1
        if depth > MAX_YAML_DEPTH:
            raise _too_deep(file)
        if seen > MAX_YAML_NODES:
            raise InputError(
                f"more than {MAX_YAML_NODES:,} values once aliases are expanded "
                "(the limit on input YAML)",
                file=file,
                fix="write the values out instead of repeating large anchors (&/*)",
            )
        if isinstance(obj, dict):
            stack.extend((v, depth + 1) for v in obj.values())
        elif isinstance(obj, list):
            stack.extend((v, depth + 1) for v in obj)


def _kind_line(text: str) -> str | None:
    """The `kind:` of a file that does not parse, when its line is readable."""
    m = re.search(r"^kind:\s*([a-z]+)\s*$", text, re.MULTILINE)
    return m.group(1) if m else None


def _schema_hint(kind: str | None) -> str:
    if kind == "workload":
        return "`planner workload synth --print-spec`"
    if kind:
        return f"`planner schema {kind}`"
    return "`planner schema cluster` (or models, slo, plan, profile, keys)"


def dump_yaml(data: Any) -> str:
    """YAML text with keys in the order given (plans read top-down)."""
    text: str = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    return text


def atomic_write_text(path: str | Path, text: str, mode: int | None = None) -> None:
    """Write UTF-8 text atomically (see atomic_write_bytes)."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def atomic_write_bytes(path: str | Path, data: bytes, mode: int | None = None) -> None:
    """Write via a temp file in the same directory and rename: readers see old or new, never half.

    `mode`: the file's mode whatever the umask (0o600 for secrets); default 0666 less the umask."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        # mkstemp makes 0600; give the file the mode asked for, or an ordinary one
        os.fchmod(fd, mode if mode is not None else 0o666 & ~_umask())
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
