"""Per-column checks of a trace (planner.trace.frame): located errors, types, bounds.

Each check names the file, the 1-based data row (and the line for text files), the column
and the fix. Bounds: token counts up to MAX_TOKENS per request; a span of at most MAX_SPAN_S.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from planner.errors import InputError

MAX_TOKENS = 100_000_000  # per request and column: 50x the longest context a model may have
MAX_SPAN_S = 3660 * 86400.0  # ten years between the first and the last request, s
TOKEN_COLUMNS = ("input_tokens", "output_tokens", "cached_tokens")


def where(i: int, line_offset: int | None) -> str:
    """'row 5 (line 6)' for a 0-based position; rows count data rows from 1."""
    row = f"row {i + 1}"
    return f"{row} (line {i + 1 + line_offset})" if line_offset is not None else row


def refuse_first(
    mask: np.ndarray,
    column: str,
    what: Callable[[int], str],
    fix: str,
    file: str | None,
    line_offset: int | None,
) -> None:
    """InputError at the first row where `mask` holds: `<row>, column '<column>': <what(i)>`."""
    bad = np.flatnonzero(mask)
    if len(bad):
        i = int(bad[0])
        raise InputError(
            f"{where(i, line_offset)}, column '{column}': {what(i)}", file=file, fix=fix
        )


def check_values(col: pd.Series, name: str, file: str | None, line_offset: int | None) -> None:
    """Refuse booleans, lists and mappings in a column (JSONL and Parquet can hold them)."""
    if pd.api.types.is_bool_dtype(col):
        raise InputError(
            f"column '{name}' holds booleans (true/false)", file=file, fix=FIX_TYPE[name]
        )
    if col.dtype != object:
        return
    bad = col.map(lambda v: isinstance(v, (bool, np.bool_, list, dict, tuple, np.ndarray)))

    def what(i: int) -> str:
        v = col.iloc[i]
        kind = "a boolean" if isinstance(v, (bool, np.bool_)) else f"a {type(v).__name__}"
        return f"{v!r} is {kind}, not a value"

    refuse_first(bad.to_numpy(dtype=bool), name, what, FIX_TYPE[name], file, line_offset)


FIX_TYPE = {
    "timestamp": "use seconds from the start (e.g. 12.5) or ISO-8601",
    "model": "write the model name as a string",
    "user": "write the user as a string",
    "session": "write the session id as a string",
    "served_by": "write the stand-in's model name as a string",
    "substituted": "'substituted' is 0 or 1",
    **{c: f"'{c}' is a token count (an integer)" for c in TOKEN_COLUMNS},
}


def seconds_column(col: pd.Series, file: str | None, line_offset: int | None) -> np.ndarray:
    """Timestamps as float seconds: numbers pass, ISO-8601 strings are converted."""
    check_values(col, "timestamp", file, line_offset)
    out: np.ndarray
    if pd.api.types.is_numeric_dtype(col):
        out = col.to_numpy(dtype="float64", na_value=np.nan)
    elif pd.api.types.is_datetime64_any_dtype(col):
        out = from_datetimes(col)
    else:
        num = pd.to_numeric(col, errors="coerce")
        if num.notna().all() or num.isna().sum() == col.isna().sum():
            out = num.to_numpy(dtype="float64", na_value=np.nan)
        else:
            dt = pd.to_datetime(col.astype("string"), errors="coerce", utc=True, format="ISO8601")
            refuse_first(
                dt.isna().to_numpy() & col.notna().to_numpy(),
                "timestamp",
                lambda i: f"{col.iloc[i]!r} is neither a number of seconds nor an ISO-8601 time",
                "write seconds from the start (e.g. 12.5) or ISO-8601 "
                "(e.g. 2026-01-05T09:00:00Z), one style for the whole file",
                file,
                line_offset,
            )
            out = from_datetimes(dt)
    at = (file, line_offset)
    refuse_first(
        ~np.isfinite(out),
        "timestamp",
        lambda i: "missing or not a number",
        "every request needs an arrival time",
        *at,
    )
    refuse_first(
        out < 0,
        "timestamp",
        lambda i: f"{out[i]} is negative",
        "timestamps are seconds from the start of the trace (>= 0)",
        *at,
    )
    lo, hi = int(out.argmin()), int(out.argmax())
    if out[hi] - out[lo] > MAX_SPAN_S:
        raise InputError(
            f"{where(hi, line_offset)}, column 'timestamp': {out[hi]:g} is "
            f"{(out[hi] - out[lo]) / 86400:,.0f} days after the first request "
            f"({where(lo, line_offset)}); a trace spans at most {MAX_SPAN_S / 86400:,.0f} days",
            file=file,
            fix="fix the outlier (a timestamp in ms or a typo?), or drop the row",
        )
    return out


def from_datetimes(dt: pd.Series) -> np.ndarray:
    """Seconds since 00:00 UTC of the first timestamp's day (keeps the hour of day)."""
    dt = pd.to_datetime(dt, utc=True)
    origin = dt.min().floor("D")
    out: np.ndarray = ((dt - origin) / pd.Timedelta(seconds=1)).to_numpy(
        dtype="float64", na_value=np.nan
    )
    return out


def ints_column(
    col: pd.Series, name: str, file: str | None, line_offset: int | None, default: int | None
) -> np.ndarray:
    """A token-count column as int64 (missing cells: `default`), with the first bad row located."""
    check_values(col, name, file, line_offset)
    num = pd.to_numeric(col, errors="coerce") if not pd.api.types.is_numeric_dtype(col) else col
    arr: np.ndarray = num.to_numpy(dtype="float64", na_value=np.nan)
    if default is not None:
        arr = np.where(col.isna().to_numpy(), float(default), arr)  # the schema's default
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
    refuse_first(
        bad,
        name,
        lambda i: "missing" if pd.isna(col.iloc[i]) else f"{col.iloc[i]!r} is not a whole number",
        FIX_TYPE[name],
        file,
        line_offset,
    )
    refuse_first(
        arr > MAX_TOKENS,
        name,
        lambda i: f"{arr[i]:g} is above the limit of {MAX_TOKENS:,} tokens per request",
        "fix the row (a unit mix-up?), or drop it",
        file,
        line_offset,
    )
    return arr.astype("int64")
