"""Request traces: the schema and reading (CSV, JSONL, Parquet, SQLite); writing: write.py.

One row a request. The canonical in-memory form is a pandas DataFrame sorted by
`timestamp` with exactly the columns of `COLUMNS` and the dtypes of `DTYPES`:

- `timestamp` float64, seconds from the start of the trace. ISO-8601 timestamps are
  accepted on read and become seconds since 00:00 UTC of the first request's day, so
  the hour of day survives the conversion (characterization and drift use it); so do the
  epoch seconds of a SQLite request log (the gateway's table `requests`).
- `model` string; `input_tokens` int64 >= 1; `output_tokens` int64 >= 1;
- optional `user`, `session` string (missing: ""), `cached_tokens` int64 in
  0..input_tokens (missing: 0), the prefix already computed for this session on this model;
  `served_by` string, the model that answered when a stand-in did (missing: "", the model
  itself) and `substituted` int64 0/1, whether a stand-in answered (missing: 0): the
  gateway's request log records both.

Every problem is an InputError that names the file, the row (1-based data row, and the
line for text files) or the column, and the fix. Limits: token counts up to MAX_TOKENS per
request (planner.trace.values; a request longer than a model's context is read, and refused by
the simulator as vLLM would), a span of at most MAX_SPAN_S, at most MAX_ROWS rows, text files up to
MAX_TEXT_BYTES. Rows out of time order and exact duplicates are kept (sorted) and counted in
the frame's `attrs["counts"]`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError
from planner.trace.values import (
    TOKEN_COLUMNS,
    check_values,
    ints_column,
    refuse_first,
    seconds_column,
    where,
)

COLUMNS = [
    "timestamp",
    "model",
    "input_tokens",
    "output_tokens",
    "user",
    "session",
    "cached_tokens",
    "served_by",
    "substituted",
]
REQUIRED = ["timestamp", "model", "input_tokens", "output_tokens"]
DTYPES = {
    "timestamp": "float64",
    "model": "string",
    "input_tokens": "int64",
    "output_tokens": "int64",
    "user": "string",
    "session": "string",
    "cached_tokens": "int64",
    "served_by": "string",
    "substituted": "int64",
}
_STRINGS = ("model", "user", "session", "served_by")
_INTS = TOKEN_COLUMNS
SUFFIXES = (".csv", ".jsonl", ".parquet", ".sqlite", ".db")
MAX_ROWS = 20_000_000  # requests in one trace
MAX_TEXT_BYTES = 4 << 30  # size of a CSV or JSONL trace, bytes

TRACE_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "planner trace row",
    "description": (
        "One request. Files: CSV with a header, JSONL (one object a line), Parquet, or a "
        "SQLite database with a table `requests` holding these columns."
    ),
    "type": "object",
    "required": REQUIRED,
    "additionalProperties": True,
    "properties": {
        "timestamp": {
            "description": "arrival, seconds from the start of the trace, or ISO-8601 "
            "(converted to seconds since 00:00 UTC of the first request's day)",
            "oneOf": [{"type": "number", "minimum": 0}, {"type": "string", "format": "date-time"}],
        },
        "model": {"type": "string", "minLength": 1, "description": "model name from models.yaml"},
        "input_tokens": {"type": "integer", "minimum": 1, "description": "prompt tokens"},
        "output_tokens": {"type": "integer", "minimum": 1, "description": "generated tokens"},
        "user": {"type": "string", "default": "", "description": "who sent it"},
        "session": {"type": "string", "default": "", "description": "agent session id"},
        "cached_tokens": {
            "type": "integer",
            "minimum": 0,
            "default": 0,
            "description": "prompt prefix already computed for this session on this model "
            "(at most input_tokens)",
        },
        "served_by": {
            "type": "string",
            "default": "",
            "description": "the stand-in model that answered ('': the model itself)",
        },
        "substituted": {
            "type": "integer",
            "minimum": 0,
            "maximum": 1,
            "default": 0,
            "description": "1 when a stand-in answered",
        },
    },
}


def empty_trace() -> pd.DataFrame:
    """A canonical trace with no rows."""
    return pd.DataFrame({c: pd.Series([], dtype=DTYPES[c]) for c in COLUMNS})


def normalize(
    df: pd.DataFrame,
    *,
    file: str | None = None,
    model_names: Sequence[str] | None = None,
    line_offset: int | None = None,
) -> pd.DataFrame:
    """Validate a frame and return the canonical trace (columns, dtypes, sorted by time).

    `line_offset` maps a 0-based row to its file line (1 for a CSV header); None when the
    source has no lines. Extra columns are dropped.
    """
    _check_shape(df, file)
    out = _columns(df, file, line_offset)
    _check_ranges(out, (file, line_offset))
    res = pd.DataFrame({c: pd.Series(out[c], dtype=DTYPES[c]) for c in COLUMNS})
    if model_names is not None:
        _check_known_models(res, model_names, file, line_offset)
    ts = res["timestamp"].to_numpy()
    counts = {
        "out_of_order": int((ts[1:] < ts[:-1]).sum()),  # rows earlier than the row before
        "duplicates": int(res.duplicated().sum()),  # rows equal to an earlier one in every column
    }
    res = sort_trace(res)
    res.attrs["counts"] = counts
    return res


def _check_shape(df: pd.DataFrame, file: str | None) -> None:
    """Some rows, not too many, and the required columns."""
    if len(df) == 0:
        raise InputError(
            "the trace has no requests", file=file, fix="write at least one row after the header"
        )
    if len(df) > MAX_ROWS:
        raise InputError(
            f"{len(df):,} requests, over the limit of {MAX_ROWS:,} for one trace",
            file=file,
            fix="plan on a shorter period (a few weeks is enough)",
        )
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise InputError(
            f"missing column(s) {missing}; found {[str(c) for c in df.columns]}",
            file=file,
            fix=f"a trace needs {REQUIRED}; optional {COLUMNS[4:]} (`planner schema trace`)",
        )


def _columns(df: pd.DataFrame, file: str | None, line_offset: int | None) -> dict[str, Any]:
    """Each canonical column, parsed and checked (a missing optional one at its default)."""
    at = (file, line_offset)
    out: dict[str, Any] = {"timestamp": seconds_column(df["timestamp"], file, line_offset)}
    for name in _STRINGS:
        if name not in df.columns:
            out[name] = np.full(len(df), "", dtype=object)
            continue
        col = df[name]
        check_values(col, name, file, line_offset)
        if name == "model":
            na = col.isna().to_numpy() | (col.astype("string").str.strip() == "").to_numpy()
            refuse_first(
                na, "model", lambda i: "empty", "every request names the model it calls", *at
            )
        # Whole-number floats (a session id read as 3.0) are written back as "3".
        if pd.api.types.is_float_dtype(col):
            col = col.map(lambda v: "" if pd.isna(v) else (str(int(v)) if v == int(v) else str(v)))
        out[name] = col.astype("string").fillna("")
    for name in (*_INTS, "substituted"):
        if name not in df.columns:
            out[name] = np.zeros(len(df), dtype="int64")
            continue
        default = 0 if name not in REQUIRED else None
        out[name] = ints_column(df[name], name, file, line_offset, default)
    return out


def _check_ranges(out: dict[str, Any], at: tuple[str | None, int | None]) -> None:
    """Token counts in range, `substituted` 0 or 1, the cached prefix within the prompt."""
    for name, low in (("input_tokens", 1), ("output_tokens", 1), ("cached_tokens", 0)):
        v = out[name]

        def below(i: int, v: np.ndarray = v, low: int = low) -> str:
            return f"{int(v[i])} is below {low}"

        refuse_first(v < low, name, below, f"'{name}' must be >= {low}; drop or fix the row", *at)
    sub = out["substituted"]
    refuse_first(
        (sub < 0) | (sub > 1),
        "substituted",
        lambda i: f"{int(sub[i])} is neither 0 nor 1",
        "'substituted' is 1 when a stand-in answered, else 0",
        *at,
    )
    inp, cached = out["input_tokens"], out["cached_tokens"]
    refuse_first(
        cached > inp,
        "cached_tokens",
        lambda i: f"{int(cached[i])} exceeds input_tokens {int(inp[i])}",
        "the cached prefix is part of the prompt: 0 <= cached_tokens <= input_tokens",
        *at,
    )


def _check_known_models(
    res: pd.DataFrame, model_names: Sequence[str], file: str | None, line_offset: int | None
) -> None:
    """Every model the trace names is in the models file."""
    known = set(model_names)
    seen = res["model"].unique()
    absent = sorted(str(m) for m in seen if m not in known)
    if absent:
        first = int(np.flatnonzero(res["model"].isin(absent).to_numpy())[0])
        raise InputError(
            f"model(s) {absent} are not in the models file (first at "
            f"{where(first, line_offset)}); the models file has {list(model_names)}",
            file=file,
            fix="rename them in the trace, add them to models.yaml, or import with "
            "`planner workload import --assign` to map requests onto known models",
        )


def sort_trace(df: pd.DataFrame) -> pd.DataFrame:
    """Stable sort by timestamp (ties keep file order), fresh 0..n-1 index."""
    order = np.argsort(df["timestamp"].to_numpy(), kind="stable")
    return df.iloc[order].reset_index(drop=True)


def _read_raw(p: Path) -> tuple[pd.DataFrame, int | None]:
    """The file as a raw frame and the row->line offset (None for binary formats)."""
    suffix = p.suffix.lower()
    name = str(p)
    if suffix in (".csv", ".jsonl") and p.stat().st_size > MAX_TEXT_BYTES:
        raise InputError(
            f"{p.stat().st_size / 2**30:.1f} GiB, over the {MAX_TEXT_BYTES >> 30} GiB limit on "
            "text traces",
            file=name,
            fix="write it as Parquet, or plan on a shorter period",
        )
    if suffix == ".csv":
        return _read_csv(p), 1
    if suffix == ".jsonl":
        # Blank lines would shift the row->line map; only an exact map gets a line number.
        return _read_jsonl(p), None
    if suffix == ".parquet":
        try:
            return pd.read_parquet(p), None
        except Exception as e:  # pyarrow raises several unrelated types for bad files
            raise InputError(f"not a readable Parquet file: {e}", file=name) from None
    if suffix in (".sqlite", ".db"):
        raw = request_log_rows(p)
        if raw is None:
            raise InputError(
                "no table 'requests'",
                file=name,
                fix="point at the gateway's request log (table `requests`)",
            )
        return raw, None
    raise InputError(
        f"unknown trace format {suffix!r}",
        file=name,
        fix=f"use one of {', '.join(SUFFIXES)}",
    )


def _read_csv(p: Path) -> pd.DataFrame:
    """A CSV trace as a raw frame (the string columns as strings)."""
    try:
        return pd.read_csv(
            p, dtype={c: "string" for c in _STRINGS}, keep_default_na=True, low_memory=False
        )
    except pd.errors.EmptyDataError:
        raise InputError(
            "the file is empty", file=str(p), fix=f"write a header line {','.join(REQUIRED)}"
        ) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise InputError(f"not valid CSV: {str(e).strip()}", file=str(p)) from None


def _read_jsonl(p: Path) -> pd.DataFrame:
    """A JSON-lines trace as a raw frame, one JSON object a line (blank lines skipped)."""
    rows = []
    with open(p, "rb") as f:
        for lineno, raw_line in enumerate(f, start=1):
            obj = _jsonl_object(raw_line, lineno, str(p))
            if obj is not None:
                rows.append(obj)
    return pd.DataFrame(rows)


def _jsonl_object(raw_line: bytes, lineno: int, name: str) -> dict[str, Any] | None:
    """One line of a JSON-lines trace as an object; None for a blank line."""
    try:
        line = raw_line.decode("utf-8")
        if not line.strip():
            return None
        obj = json.loads(line)
    except UnicodeDecodeError as e:
        raise InputError(
            f"line {lineno}: not UTF-8 (byte {e.start} of the line)",
            file=name,
            fix="save the file as UTF-8",
        ) from None
    except json.JSONDecodeError as e:
        raise InputError(
            f"line {lineno}: not valid JSON ({e.msg})",
            file=name,
            fix="one JSON object a line",
        ) from None
    except RecursionError:
        raise InputError(
            f"line {lineno}: JSON nested too deep",
            file=name,
            fix="one flat object a line",
        ) from None
    if not isinstance(obj, dict):
        raise InputError(f"line {lineno}: not a JSON object", file=name)
    return obj


def request_log_rows(
    path: Path, window: tuple[float, float] | None = None, *, epoch: bool = False
) -> pd.DataFrame | None:
    """Raw rows of a SQLite request log (table `requests`; None when it has no such table).

    `window`: only rows with `start <= timestamp < end` (epoch s). The gateway logs epoch
    seconds; they become seconds since 00:00 UTC of the first row's day, unless `epoch`
    (`planner adjust` keeps the clock's time base). A file that is not SQLite, or damaged,
    raises InputError.
    """
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise InputError(f"cannot open SQLite database: {e}", file=str(path)) from None
    con.text_factory = lambda raw: raw.decode("utf-8", "replace")  # damaged text: U+FFFD
    try:
        cols = [r[1] for r in con.execute("PRAGMA table_info(requests)")]
        if not cols:
            return None
        want = [c for c in COLUMNS if c in cols]
        query = f"SELECT {', '.join(want)} FROM requests"  # names come from COLUMNS
        if window is not None:
            query += " WHERE timestamp >= ? AND timestamp < ?"
        raw = pd.read_sql_query(query, con, params=window)
    except (sqlite3.Error, UnicodeDecodeError) as e:  # SQLite quotes damaged bytes in errors
        raise InputError(
            f"cannot read table 'requests': {e}",
            file=str(path),
            fix="the request log is damaged: move it aside (the gateway starts a new one)",
        ) from None
    finally:
        con.close()
    if "timestamp" in raw.columns and len(raw) and not epoch:
        ts = pd.to_numeric(raw["timestamp"], errors="coerce")
        if ts.notna().all():
            raw["timestamp"] = ts - np.floor(ts.min() / 86400.0) * 86400.0
    return raw


def read_trace(path: str | Path, model_names: Sequence[str] | None = None) -> pd.DataFrame:
    """Read a trace file (.csv, .jsonl, .parquet, .sqlite/.db) into the canonical frame.

    `model_names`: when given, every request's model must be one of them.
    """
    p = Path(path)
    if not p.exists():
        raise InputError("file not found", file=str(p), fix="check the path")
    if p.is_dir():
        raise InputError("is a directory, not a trace file", file=str(p))
    raw, line_offset = _read_raw(p)
    return normalize(raw, file=str(p), model_names=model_names, line_offset=line_offset)
