"""Reading imported rows: CSV with its columns checked, and the coercion that turns mapped
columns into trace rows, skipping (and counting by reason) the rows that cannot be read."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError


def skip_rows(mask: np.ndarray, reason: str, bad: np.ndarray, skipped: Counter[str]) -> None:
    """Mark rows failing `mask` (not already bad) with `reason`."""
    new = mask & ~bad
    if new.any():
        skipped[reason] += int(new.sum())
        bad |= new


def to_num(col: pd.Series | None, n: int) -> np.ndarray:
    if col is None:
        return np.full(n, np.nan)
    out: np.ndarray = pd.to_numeric(col, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    return out


def to_str(col: pd.Series | None, n: int) -> np.ndarray:
    if col is None:
        return np.full(n, "", dtype=object)
    out: np.ndarray = col.astype("string").fillna("").str.strip().to_numpy(dtype=object)
    return out


def clean_rows(
    raw: dict[str, Any], n: int, skipped: Counter[str], *, iso: bool = False
) -> pd.DataFrame:
    """Coerce mapped columns and drop bad rows (first failing reason counts)."""
    bad = np.zeros(n, bool)
    if iso:
        col = raw["timestamp"]
        dt = pd.to_datetime(col.astype("string"), errors="coerce", utc=True, format="ISO8601")
        ok = dt.notna().to_numpy()
        ts = np.full(n, np.nan)
        if ok.any():
            origin = dt[ok].min().floor("D")
            ts[ok] = ((dt[ok] - origin) / pd.Timedelta(seconds=1)).to_numpy(dtype="float64")
    else:
        ts = np.asarray(raw["timestamp"], dtype="float64")
    skip_rows(~np.isfinite(ts), "timestamp missing or unreadable", bad, skipped)
    skip_rows(np.nan_to_num(ts, nan=0.0) < 0, "negative timestamp", bad, skipped)
    ints = {}
    for name in ("input_tokens", "output_tokens", "cached_tokens"):
        v = np.asarray(raw.get(name, np.zeros(n)), dtype="float64")
        skip_rows(~np.isfinite(v) | (v != np.round(v)), f"{name} not a whole number", bad, skipped)
        ints[name] = np.nan_to_num(v, nan=0.0)
    skip_rows(ints["input_tokens"] < 0, "negative token count", bad, skipped)
    skip_rows(ints["output_tokens"] < 0, "negative token count", bad, skipped)
    skip_rows(ints["cached_tokens"] < 0, "negative token count", bad, skipped)
    skip_rows(ints["input_tokens"] == 0, "zero input tokens", bad, skipped)
    skip_rows(ints["output_tokens"] == 0, "zero output tokens (failed request)", bad, skipped)
    skip_rows(
        ints["cached_tokens"] > ints["input_tokens"], "cached_tokens > input_tokens", bad, skipped
    )
    model = np.asarray(raw.get("model", np.full(n, "", dtype=object)), dtype=object)
    if raw.get("model_required", False):
        skip_rows(model == "", "model missing", bad, skipped)
    keep = ~bad
    out = {
        "timestamp": ts[keep],
        "model": model[keep],
        "input_tokens": ints["input_tokens"][keep].astype(np.int64),
        "output_tokens": ints["output_tokens"][keep].astype(np.int64),
        "user": np.asarray(raw.get("user", np.full(n, "", dtype=object)), dtype=object)[keep],
        "session": np.asarray(raw.get("session", np.full(n, "", dtype=object)), dtype=object)[keep],
        "cached_tokens": ints["cached_tokens"][keep].astype(np.int64),
    }
    return pd.DataFrame(out)


def read_csv(p: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(p, dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise InputError("the file is empty", file=str(p)) from None
    except pd.errors.ParserError as e:
        raise InputError(f"not valid CSV: {str(e).strip()}", file=str(p)) from None


def need_columns(raw: pd.DataFrame, cols: list[str], p: Path) -> None:
    raw.columns = [str(c).strip() for c in raw.columns]
    missing = [c for c in cols if c not in raw.columns]
    if missing:
        raise InputError(
            f"missing column(s) {missing}; found {list(raw.columns)}",
            file=str(p),
            fix="check --format",
        )
