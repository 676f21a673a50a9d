"""Readers of the trace formats with one row per request: azure, burstgpt, mooncake, and
our own csv/jsonl/parquet (planner/trace/importers.py documents each format)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError
from planner.trace.frame import _read_raw
from planner.trace.rows import clean_rows, need_columns, read_csv, to_num, to_str

MOONCAKE_BLOCK_TOKENS = 512  # tokens per prompt block of `hash_ids`


def read_azure(p: Path, skipped: Counter[str]) -> tuple[pd.DataFrame, int]:
    raw = read_csv(p)
    need_columns(raw, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"], p)
    n = len(raw)
    df = clean_rows(
        {
            "timestamp": raw["TIMESTAMP"],
            "input_tokens": to_num(raw["ContextTokens"], n),
            "output_tokens": to_num(raw["GeneratedTokens"], n),
        },
        n,
        skipped,
        iso=True,
    )
    return df, n


def read_burstgpt(p: Path, skipped: Counter[str]) -> tuple[pd.DataFrame, int]:
    raw = read_csv(p)
    need_columns(raw, ["Timestamp", "Model", "Request tokens", "Response tokens"], p)
    n = len(raw)
    df = clean_rows(
        {
            "timestamp": to_num(raw["Timestamp"], n),
            "model": to_str(raw["Model"], n),
            "model_required": True,
            "input_tokens": to_num(raw["Request tokens"], n),
            "output_tokens": to_num(raw["Response tokens"], n),
            "session": to_str(raw.get("Session ID"), n),
        },
        n,
        skipped,
    )
    return df, n


def read_mooncake(p: Path, skipped: Counter[str]) -> tuple[pd.DataFrame, int]:
    rows: list[tuple[float, float, float, float]] = []
    seen: set[Any] = set()
    n = 0
    for obj in json_lines(p, skipped):
        n += 1
        if obj is None:
            continue
        if not all(k in obj for k in ("timestamp", "input_length", "output_length")):
            skipped["missing timestamp/input_length/output_length"] += 1
            continue
        hashes = obj.get("hash_ids") or []
        if not isinstance(hashes, list):
            skipped["hash_ids not a list"] += 1
            continue
        try:
            ts = float(obj["timestamp"]) / 1000.0  # ms -> s
            inp, out = float(obj["input_length"]), float(obj["output_length"])
        except (TypeError, ValueError):
            skipped["timestamp/lengths not numbers"] += 1
            continue
        hit = 0
        for h in hashes:  # longest prefix of blocks all computed before
            if h not in seen:
                break
            hit += 1
        seen.update(h for h in hashes if isinstance(h, (int, str)))
        rows.append((ts, inp, out, min(hit * MOONCAKE_BLOCK_TOKENS, inp)))
    arr = np.array(rows, dtype="float64").reshape(-1, 4)
    m = len(arr)
    df = clean_rows(
        {
            "timestamp": arr[:, 0],
            "input_tokens": arr[:, 1],
            "output_tokens": arr[:, 2],
            "cached_tokens": np.nan_to_num(arr[:, 3], nan=0.0),
        },
        m,
        skipped,
    )
    return df, n


# Column names of OpenAI-style request logs (and the usage object) -> the trace's; used when
# the trace's own name is absent. `--map SOURCE=TRACE,...` adds to and overrides these.
OPENAI_COLUMNS = {
    "created": "timestamp",
    "created_at": "timestamp",
    "time": "timestamp",
    "prompt_tokens": "input_tokens",
    "completion_tokens": "output_tokens",
    "usage.prompt_tokens": "input_tokens",
    "usage.completion_tokens": "output_tokens",
    "usage.prompt_tokens_details.cached_tokens": "cached_tokens",
    "prompt_tokens_details.cached_tokens": "cached_tokens",
    "user_id": "user",
    "session_id": "session",
    "conversation_id": "session",
}
TRACE_NAMES = (
    "timestamp",
    "model",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "user",
    "session",
)


def rename_columns(
    raw: pd.DataFrame, column_map: dict[str, str], file: str, rules: list[str]
) -> pd.DataFrame:
    """The trace's column names on `raw`: `column_map` (SOURCE -> trace name, from --map)
    first, then the OpenAI-log names for trace columns still missing; nested objects (jsonl
    `usage: {...}`) are read as dotted names. Each renaming is recorded in `rules`."""
    bad = sorted(set(column_map.values()) - set(TRACE_NAMES))
    if bad:
        from planner.schemas.common import did_you_mean

        raise InputError(
            f"--map names {bad}, which are not trace columns{did_you_mean(bad[0], TRACE_NAMES)}",
            path="--map",
            fix=f"map onto {list(TRACE_NAMES)}",
        )
    nested = [c for c in raw.columns if raw[c].map(lambda v: isinstance(v, dict)).any()]
    if nested:
        recs = [
            {k: v if isinstance(v, dict) else {} for k, v in r.items()}
            for r in raw[nested].to_dict("records")
        ]
        flat = pd.json_normalize(recs, sep=".")
        raw = pd.concat([raw.drop(columns=nested).reset_index(drop=True), flat], axis=1)
    missing = sorted(set(column_map) - set(raw.columns))
    if missing:
        raise InputError(
            f"--map names column(s) {missing} the file does not have",
            file=file,
            path="--map",
            fix=f"its columns: {sorted(map(str, raw.columns))}",
        )
    renames = dict(column_map)
    for src, dst in OPENAI_COLUMNS.items():
        taken = dst in raw.columns or dst in renames.values()
        if src in raw.columns and not taken:
            renames[src] = dst
    if renames:
        rules.append("columns: " + ", ".join(f"{a} -> {b}" for a, b in renames.items()))
        raw = raw.drop(columns=[d for d in renames.values() if d in raw.columns])
        raw = raw.rename(columns=renames)
    return raw


def read_own(
    p: Path,
    fmt: str,
    skipped: Counter[str],
    column_map: dict[str, str] | None = None,
    rules: list[str] | None = None,
) -> tuple[pd.DataFrame, int]:
    if p.suffix.lower() != f".{fmt}":
        raise InputError(f"--format {fmt} but the file ends in {p.suffix!r}", file=str(p))
    if fmt == "jsonl":
        raw, n = jsonl_rows(p, skipped)
    else:
        raw, _ = _read_raw(p)
        n = len(raw)
    raw = rename_columns(raw, column_map or {}, str(p), rules if rules is not None else [])
    missing = [
        c for c in ("timestamp", "model", "input_tokens", "output_tokens") if c not in raw.columns
    ]
    if missing and len(raw):
        raise InputError(
            f"missing column(s) {missing}",
            file=str(p),
            fix="name them with --map SOURCE=COLUMN,... (e.g. --map time=timestamp); "
            "see `planner schema trace`",
        )
    m = len(raw)
    ts_col = raw["timestamp"] if m else pd.Series([], dtype=float)
    num = pd.to_numeric(ts_col, errors="coerce")
    iso = bool(m) and num.isna().all() and ts_col.notna().any()
    df = clean_rows(
        {
            "timestamp": ts_col if iso else num.to_numpy(dtype="float64", na_value=np.nan),
            "model": to_str(raw.get("model"), m),
            "model_required": True,
            "input_tokens": to_num(raw.get("input_tokens"), m),
            "output_tokens": to_num(raw.get("output_tokens"), m),
            "cached_tokens": np.nan_to_num(to_num(raw.get("cached_tokens"), m), nan=0.0)
            if "cached_tokens" in raw.columns
            else np.zeros(m),
            "user": to_str(raw.get("user"), m),
            "session": to_str(raw.get("session"), m),
        },
        m,
        skipped,
        iso=iso,
    )
    return df, n


def json_lines(p: Path, skipped: Counter[str]) -> Iterator[dict[str, Any] | None]:
    """The JSON object of each non-blank line; None (counted in `skipped`) for one that is not."""
    with open(p, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                skipped["invalid JSON"] += 1
                yield None
                continue
            if not isinstance(obj, dict):
                skipped["not a JSON object"] += 1
                yield None
                continue
            yield obj


def jsonl_rows(p: Path, skipped: Counter[str]) -> tuple[pd.DataFrame, int]:
    rows, n = [], 0
    for obj in json_lines(p, skipped):
        n += 1
        if obj is not None:
            rows.append(obj)
    return pd.DataFrame(rows), n
