"""Traces built from hypothesis rows, as the trace and characterization properties use them."""

from __future__ import annotations

import pandas as pd

from planner.trace.frame import normalize

ROW_COLUMNS = ("timestamp", "model", "input_tokens", "output_tokens", "user", "session")


def rows_trace(rows: list[tuple], *, cached_div: int) -> pd.DataFrame:
    """The normalized trace of `rows` (each a tuple in ROW_COLUMNS order, as long as it is),
    with `cached_tokens = input_tokens // cached_div`."""
    cols = dict(zip(ROW_COLUMNS, map(list, zip(*rows, strict=True)), strict=False))
    cached = [i // cached_div for i in cols["input_tokens"]]
    return normalize(pd.DataFrame({**cols, "cached_tokens": cached}))
