"""Writing a canonical trace (CSV, JSONL, Parquet): same frame, same bytes."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from planner.errors import InputError
from planner.io import atomic_write_bytes
from planner.trace.frame import COLUMNS, DTYPES, normalize


def trace_bytes(df: pd.DataFrame, suffix: str) -> bytes:
    """The canonical trace serialized for a file suffix; same frame, same bytes."""
    if list(df.columns) != COLUMNS or any(str(df[c].dtype) != DTYPES[c] for c in COLUMNS):
        df = normalize(df)  # any other frame is validated and made canonical first
    suffix = suffix.lower()
    if suffix == ".csv":
        csv: str = df.to_csv(index=False, lineterminator="\n")
        return csv.encode("utf-8")
    if suffix == ".jsonl":
        text: str = df.to_json(orient="records", lines=True, double_precision=15, force_ascii=False)
        return (text if text.endswith("\n") else text + "\n").encode("utf-8")
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema(
            [
                pa.field(
                    c,
                    pa.float64()
                    if c == "timestamp"
                    else pa.int64()
                    if DTYPES[c] == "int64"
                    else pa.string(),
                )
                for c in COLUMNS
            ]
        )
        # No pandas metadata, fixed codec and writer options: the bytes depend on the data only.
        table = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
        table = table.replace_schema_metadata(None)
        buf = io.BytesIO()
        pq.write_table(
            table,
            buf,
            compression="zstd",
            compression_level=3,
            use_dictionary=True,
            write_statistics=True,
            row_group_size=1 << 20,
            data_page_version="1.0",
        )
        return buf.getvalue()
    raise InputError(f"cannot write trace format {suffix!r}", fix="use .csv, .jsonl or .parquet")


def write_trace(df: pd.DataFrame, path: str | Path) -> None:
    """Write a canonical trace atomically; the format follows the suffix."""
    p = Path(path)
    atomic_write_bytes(p, trace_bytes(df, p.suffix))
