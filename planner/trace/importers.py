"""Import public request traces into the planner trace schema (planner.trace.frame).

Formats (`import_trace(fmt, src, ...)`):

- `azure`: Azure LLM inference trace 2023, CSV `TIMESTAMP,ContextTokens,GeneratedTokens`
  (ISO-like times; converted to seconds since 00:00 UTC of the first day).
- `mooncake`: JSONL `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (ids of
  512-token prompt blocks). `cached_tokens` = 512 x the longest prefix of the request's
  `hash_ids` whose blocks all appeared in earlier requests, capped at `input_length`.
- `burstgpt`: CSV `Timestamp, Session ID, Elapsed time, Model, Request tokens, Response
  tokens, Total tokens, Log Type` (Timestamp in seconds; `Session ID` optional).
- `servegen`: per-client CSV files without a header (a file, or a directory of `*.csv`;
  the client is the file's stem), one row per 600 s window:
  `window_start_s, rate, cv, distribution, param1, param2`. Arrivals in the window are a
  renewal process with mean rate `rate` (requests/s) and inter-arrival coefficient of
  variation `cv`, drawn from `distribution`: `exponential`/`poisson` (cv ignored), `gamma`
  (shape 1/cv^2), `weibull` (shape solved from cv), `lognormal` (sigma^2 = ln(1 + cv^2)).
  `param1`/`param2` are the window's mean input/output tokens (empty: 1024/256); each
  request's lengths are lognormal around those means (sigma 1.0 input, 0.8 output).
- `csv`/`jsonl`/`parquet`: our own schema, row by row (bad rows skipped, not fatal).

Rules for what a format lacks (documented in `ImportSummary.rules`):

- Sessions: a format's session column is kept. Without one, requests of one user/client
  form sessions split at gaps > SESSION_GAP_S; with no user/client either (aggregate
  production traces of many people: azure, mooncake) each request is its own session,
  since a gap rule would glue thousands of users into one stream.
- Models (`assign`): `None` keeps the format's model names (formats without any need a
  rule). `hash`: a stable hash (BLAKE2b) of the session id picks one of `model_names`, so
  a session stays on one model. A mix `a=0.5,b=0.3,c=0.2`: each session draws its model
  with those weights (normalized), seeded.

Rows that cannot be read are skipped and counted by reason in `ImportSummary.skipped`.
The readers: formats.py (one row per request), servegen.py (rate windows),
rows.py (CSV and row coercion).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError
from planner.trace.formats import (
    MOONCAKE_BLOCK_TOKENS,
    read_azure,
    read_burstgpt,
    read_mooncake,
    read_own,
)
from planner.trace.frame import COLUMNS, DTYPES, normalize
from planner.trace.servegen import read_servegen

FORMATS = ("azure", "mooncake", "burstgpt", "servegen", "csv", "jsonl", "parquet")
SESSION_GAP_S = 300.0


@dataclass
class ImportSummary:
    """What an import read, kept, skipped (by reason) and which rules filled gaps."""

    format: str
    source: str
    rows_read: int = 0
    rows_kept: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    rules: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "format": self.format,
            "source": self.source,
            "rows_read": self.rows_read,
            "rows_kept": self.rows_kept,
            "skipped": dict(self.skipped),
            "rules": list(self.rules),
        }


def parse_assign(rule: str | None, model_names: list[str] | None) -> tuple[str, dict[str, float]]:
    """('keep'|'hash'|'mix', weights) from an --assign value; InputError when malformed."""
    if rule is None or rule == "" or rule == "keep":
        return "keep", {}
    if rule == "hash":
        if not model_names:
            raise InputError(
                "--assign hash needs the models to hash onto", fix="pass --models models.yaml"
            )
        return "hash", {}
    weights: dict[str, float] = {}
    for part in rule.split(","):
        name, sep, w = part.strip().partition("=")
        try:
            val = float(w)
        except ValueError:
            val = -1.0
        if not sep or not name or not math.isfinite(val) or val < 0:
            raise InputError(
                f"--assign: cannot read {part.strip()!r}",
                fix="use `hash` or a mix like coder-32b=0.5,planner-7b=0.3,summarizer-8b=0.2",
            )
        weights[name.strip()] = weights.get(name.strip(), 0.0) + val
    if sum(weights.values()) <= 0:
        raise InputError("--assign: the weights sum to 0", fix="give at least one positive weight")
    if model_names:
        unknown = sorted(set(weights) - set(model_names))
        if unknown:
            raise InputError(
                f"--assign names models {unknown} that are not in the models file "
                f"({list(model_names)})",
                fix="use names from models.yaml",
            )
    return "mix", weights


def _stable_hash(keys: np.ndarray) -> np.ndarray:
    """64-bit BLAKE2b of each key (stable across runs and machines, unlike hash())."""
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8).digest(), "big")
            for k in keys
        ],
        dtype=np.uint64,
    )


def _sessions(df: pd.DataFrame, prefix: str, rules: list[str]) -> pd.DataFrame:
    """Fill missing sessions: gap rule per user, or one session per request without users."""
    sess = df["session"].to_numpy(dtype=object)
    missing = sess == ""
    if not missing.any():
        return df
    user = df["user"].to_numpy(dtype=object)
    ts = df["timestamp"].to_numpy()
    with_user = missing & (user != "")
    if with_user.any():
        idx = np.flatnonzero(with_user)
        order = idx[np.lexsort((ts[idx], user[idx].astype(str)))]
        u, t = user[order], ts[order]
        new = np.ones(len(order), bool)
        new[1:] = (u[1:] != u[:-1]) | (t[1:] - t[:-1] > SESSION_GAP_S)
        num = np.cumsum(new) - 1
        sess[order] = [f"{uu}-g{k}" for uu, k in zip(u, num, strict=True)]
        rules.append(f"sessions: per user/client, a gap > {SESSION_GAP_S:g} s starts a new session")
    alone = missing & (user == "")
    if alone.any():
        sess[alone] = [f"{prefix}{i}" for i in np.flatnonzero(alone)]
        rules.append("sessions: no user or session column, so each request is its own session")
    df = df.copy()
    df["session"] = sess
    return df


def _assign(
    df: pd.DataFrame,
    rule: str | None,
    model_names: list[str] | None,
    seed: int,
    rules: list[str],
) -> pd.DataFrame:
    kind, weights = parse_assign(rule, model_names)
    if kind == "keep":
        if (df["model"] == "").any():
            raise InputError(
                "this format has no model column, so requests need a model rule",
                fix="pass --assign hash --models models.yaml, or --assign a=0.5,b=0.5",
            )
        return df
    sess = df["session"].to_numpy(dtype=object)
    uniq, inv = np.unique(sess.astype(str), return_inverse=True)
    if kind == "hash":
        names = list(model_names or [])
        pick = (_stable_hash(uniq) % np.uint64(len(names))).astype(np.int64)
        rules.append(f"models: BLAKE2b hash of the session id onto {names}")
    else:
        names = list(weights)
        p = np.array([weights[m] for m in names])
        rng = np.random.default_rng(seed)
        pick = rng.choice(len(names), size=len(uniq), p=p / p.sum())
        rules.append(f"models: each session drawn from the mix {weights} (seed {seed})")
    df = df.copy()
    df["model"] = np.array(names, dtype=object)[pick[inv]]
    return df


def import_trace(
    fmt: str,
    src: str | Path,
    *,
    model_names: list[str] | None = None,
    assign: str | None = None,
    seed: int = 0,
    column_map: dict[str, str] | None = None,
) -> tuple[pd.DataFrame, ImportSummary]:
    """Read `src` in format `fmt` into a canonical trace and say what happened
    (`column_map`: source column -> trace column, for csv/jsonl/parquet)."""
    if column_map and fmt not in ("csv", "jsonl", "parquet"):
        raise InputError(
            f"--map applies to csv, jsonl and parquet files, not --format {fmt}",
            path="--map",
            fix="drop --map (this format's columns are known)",
        )
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}", fix=f"use one of {', '.join(FORMATS)}")
    p = Path(src)
    if not p.exists():
        raise InputError("file not found", file=str(p), fix="check the path")
    if p.is_dir() and fmt != "servegen":
        raise InputError("is a directory", file=str(p), fix="give a file")
    skipped: Counter[str] = Counter()
    summary = ImportSummary(format=fmt, source=str(p))
    if fmt == "azure":
        df, n = read_azure(p, skipped)
    elif fmt == "burstgpt":
        df, n = read_burstgpt(p, skipped)
    elif fmt == "mooncake":
        df, n = read_mooncake(p, skipped)
        summary.rules.append(
            f"cached_tokens: longest prefix of hash_ids seen earlier x {MOONCAKE_BLOCK_TOKENS}"
        )
    elif fmt == "servegen":
        df, n = read_servegen(p, skipped, seed)
        summary.rules.append(
            "arrivals: renewal process per 600 s window from (rate, cv, distribution); "
            f"lengths lognormal around param1/param2 (seed {seed})"
        )
    else:
        df, n = read_own(p, fmt, skipped, column_map, summary.rules)
    summary.rows_read = n
    summary.skipped = dict(sorted(skipped.items()))
    if len(df) == 0:
        raise InputError(
            f"no usable requests ({n} rows read; skipped: {summary.skipped or 'none'})",
            file=str(p),
            fix="check --format and the file",
        )
    df = _sessions(df, "r", summary.rules)
    df = _assign(df, assign, model_names, seed, summary.rules)
    df = pd.DataFrame(
        {c: pd.Series(df[c].to_numpy(), dtype=DTYPES[c]) for c in COLUMNS if c in df.columns}
    )
    out = normalize(df, file=str(p), model_names=model_names)
    summary.rows_kept = len(out)
    if summary.rows_kept + sum(skipped.values()) != n and fmt != "servegen":
        raise AssertionError("import lost rows without counting them")  # nothing silently
    if fmt == "servegen":
        summary.rules.append(f"{n} windows read, {summary.rows_kept} requests generated")
    return out, summary
