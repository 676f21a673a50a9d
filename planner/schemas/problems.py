"""Pydantic validation errors as one `InputError`: the file, the field path of the most
telling error, and a fix (a misspelt key named as the field it stands for)."""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from planner.errors import InputError
from planner.schemas.common import did_you_mean

_FIXES = {
    "extra_forbidden": "remove the key, or check its spelling against `planner schema {kind}`",
    "missing": "add the field; `planner schema {kind}` lists the required ones",
    "greater_than_equal": "use a value in the allowed range",
    "greater_than": "use a value in the allowed range",
    "less_than_equal": "use a value in the allowed range",
    "literal_error": "use one of the allowed values",
    "string_pattern_mismatch": "use letters, digits and . _ : - only, starting with a letter or digit",
    "finite_number": "use a finite number",
}


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "GpuSpec", "ModelArch", "function-after[_known_type(), str]"):
            continue  # union-branch labels pydantic adds; not a user path
        elif str(part).startswith(("function-", "union[")):
            continue
        else:
            out += f".{path_key(part)}" if out else path_key(part)
    return out


def path_key(key: Any) -> str:
    """A mapping key as one segment of a field path (odd keys quoted: the path stays a word)."""
    return str(key) if re.fullmatch(r"[\w-]+", str(key)) else repr(str(key))


def _extra_hint(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """`did you mean` for an unknown key, from the fields of the object that holds it."""
    key = str(loc[-1])
    cls: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or cls is None:
            continue
        field = getattr(cls, "model_fields", {}).get(part)
        if field is None:
            cls = None
            break
        ann = field.annotation
        args = getattr(ann, "__args__", ()) or (ann,)
        cls = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if cls is None:
            for a in args:
                inner = getattr(a, "__args__", ())
                cls = next(
                    (b for b in inner if isinstance(b, type) and issubclass(b, BaseModel)), None
                )
                if cls:
                    break
    return did_you_mean(key, getattr(cls, "model_fields", {}) or {})


def _misspelt(errs: list[ErrorDetails]) -> dict[int, str]:
    """Unknown keys that stand for a missing field beside them (a typo, or another name for
    it: `ram_gib` for `cpu_memory_gib`): error index -> the field meant. A key pairs with a
    missing field of a similar name, or with the only one missing where it is the only
    unknown key."""
    missing: dict[tuple[str | int, ...], list[str]] = {}
    unknown: dict[tuple[str | int, ...], list[int]] = {}
    for i, e in enumerate(errs):
        if e["type"] == "missing":
            missing.setdefault(tuple(e["loc"][:-1]), []).append(str(e["loc"][-1]))
        elif e["type"] == "extra_forbidden":
            unknown.setdefault(tuple(e["loc"][:-1]), []).append(i)
    out: dict[int, str] = {}
    for parent, idx in unknown.items():
        here = missing.get(parent, [])
        for i in idx:
            close = difflib.get_close_matches(str(errs[i]["loc"][-1]), here, n=1)
            if close:
                out[i] = close[0]
            elif len(idx) == 1 and len(here) == 1:
                out[i] = here[0]
    return out


def _problem(
    err: ErrorDetails, model: type[BaseModel], kind: str, meant: str | None
) -> dict[str, str]:
    """One pydantic error as {path, message, fix} (`meant`: the field a misspelt key stands for)."""
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        hint = f" (did you mean {meant!r}?)" if meant else _extra_hint(model, err["loc"])
        msg = f"unknown key {str(err['loc'][-1])!r}{hint}"
    elif err["type"] == "string_pattern_mismatch":
        msg = f"{err['input']!r} is not a safe name (it names files and processes)"
    fix = _FIXES.get(err["type"], "see `planner schema {kind}`").format(kind=kind)
    if meant:
        fix = f"rename it to {meant!r}"
    return {"path": _loc(err["loc"]) or "(top level)", "message": msg, "fix": fix}


def validation_to_input_error(
    e: ValidationError, file: str, kind: str, model: type[BaseModel]
) -> InputError:
    """Every pydantic error as one InputError: the most telling one names file, field path
    and fix; the others follow, one a line (and in `problems`, for --json)."""
    errs = e.errors(include_url=False)
    typos = _misspelt(errs)
    # a missing field explained by a misspelt key beside it is not reported twice
    meant = {(tuple(errs[i]["loc"][:-1]), m) for i, m in typos.items()}
    keep = [
        i
        for i, x in enumerate(errs)
        if not (x["type"] == "missing" and (tuple(x["loc"][:-1]), str(x["loc"][-1])) in meant)
    ]
    # A misspelt key first; else the most specific branch of a union (the longest location).
    k = max(
        keep,
        key=lambda i: (i in typos, errs[i]["type"] != "string_type", len(errs[i]["loc"])),
    )
    order = [k] + [i for i in keep if i != k]
    problems = [_problem(errs[i], model, kind, typos.get(i)) for i in order]
    first = problems[0]
    msg = first["message"]
    if len(problems) > 1:
        msg += f" (and {len(problems) - 1} more error(s)):" + "".join(
            f"\n  {p['path']}: {p['message']}" for p in problems[1:]
        )
    err = InputError(msg, file=file, path=first["path"], fix=first["fix"])
    err.problems = problems
    return err
