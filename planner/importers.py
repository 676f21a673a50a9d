"""Import public request traces into the planner trace schema (planner.trace).

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
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError
from planner.trace import COLUMNS, DTYPES, _read_raw, normalize

FORMATS = ("azure", "mooncake", "burstgpt", "servegen", "csv", "jsonl", "parquet")
SESSION_GAP_S = 300.0
MOONCAKE_BLOCK_TOKENS = 512
SERVEGEN_WINDOW_S = 600.0
SERVEGEN_DEFAULT_IN_TOKENS = 1024.0
SERVEGEN_DEFAULT_OUT_TOKENS = 256.0
SERVEGEN_SIGMA_IN = 1.0
SERVEGEN_SIGMA_OUT = 0.8


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


def _skip(mask: np.ndarray, reason: str, bad: np.ndarray, skipped: Counter) -> None:
    """Mark rows failing `mask` (not already bad) with `reason`."""
    new = mask & ~bad
    if new.any():
        skipped[reason] += int(new.sum())
        bad |= new


def _to_num(col: pd.Series | None, n: int) -> np.ndarray:
    if col is None:
        return np.full(n, np.nan)
    return pd.to_numeric(col, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def _to_str(col: pd.Series | None, n: int) -> np.ndarray:
    if col is None:
        return np.full(n, "", dtype=object)
    return col.astype("string").fillna("").str.strip().to_numpy(dtype=object)


def _clean(raw: dict[str, Any], n: int, skipped: Counter, *, iso: bool = False) -> pd.DataFrame:
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
    _skip(~np.isfinite(ts), "timestamp missing or unreadable", bad, skipped)
    _skip(np.nan_to_num(ts, nan=0.0) < 0, "negative timestamp", bad, skipped)
    ints = {}
    for name in ("input_tokens", "output_tokens", "cached_tokens"):
        v = np.asarray(raw.get(name, np.zeros(n)), dtype="float64")
        _skip(~np.isfinite(v) | (v != np.round(v)), f"{name} not a whole number", bad, skipped)
        ints[name] = np.nan_to_num(v, nan=0.0)
    _skip(ints["input_tokens"] < 0, "negative token count", bad, skipped)
    _skip(ints["output_tokens"] < 0, "negative token count", bad, skipped)
    _skip(ints["cached_tokens"] < 0, "negative token count", bad, skipped)
    _skip(ints["input_tokens"] == 0, "zero input tokens", bad, skipped)
    _skip(ints["output_tokens"] == 0, "zero output tokens (failed request)", bad, skipped)
    _skip(
        ints["cached_tokens"] > ints["input_tokens"], "cached_tokens > input_tokens", bad, skipped
    )
    model = np.asarray(raw.get("model", np.full(n, "", dtype=object)), dtype=object)
    if raw.get("model_required", False):
        _skip(model == "", "model missing", bad, skipped)
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


def _read_azure(p: Path, skipped: Counter) -> tuple[pd.DataFrame, int]:
    raw = _csv(p)
    _need(raw, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"], p)
    n = len(raw)
    df = _clean(
        {
            "timestamp": raw["TIMESTAMP"],
            "input_tokens": _to_num(raw["ContextTokens"], n),
            "output_tokens": _to_num(raw["GeneratedTokens"], n),
        },
        n,
        skipped,
        iso=True,
    )
    return df, n


def _read_burstgpt(p: Path, skipped: Counter) -> tuple[pd.DataFrame, int]:
    raw = _csv(p)
    _need(raw, ["Timestamp", "Model", "Request tokens", "Response tokens"], p)
    n = len(raw)
    df = _clean(
        {
            "timestamp": _to_num(raw["Timestamp"], n),
            "model": _to_str(raw["Model"], n),
            "model_required": True,
            "input_tokens": _to_num(raw["Request tokens"], n),
            "output_tokens": _to_num(raw["Response tokens"], n),
            "session": _to_str(raw.get("Session ID"), n),
        },
        n,
        skipped,
    )
    return df, n


def _read_mooncake(p: Path, skipped: Counter) -> tuple[pd.DataFrame, int]:
    rows: list[tuple[float, float, float, float]] = []
    seen: set[Any] = set()
    n = 0
    for obj in _json_lines(p, skipped):
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
    df = _clean(
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


def _weibull_shape(cv: float) -> float:
    """Weibull shape k whose inter-arrival coefficient of variation is cv (bisection)."""

    def cv_of(k: float) -> float:
        g1, g2 = math.lgamma(1 + 1 / k), math.lgamma(1 + 2 / k)
        return math.sqrt(max(math.exp(g2 - 2 * g1) - 1, 0.0))

    lo, hi = 0.05, 50.0  # cv_of decreases in k
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if cv_of(mid) > cv:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def _gaps(dist: str, rate: float, cv: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Inter-arrival times with mean 1/rate and coefficient of variation cv."""
    mean = 1.0 / rate
    if dist in ("exponential", "poisson"):
        return rng.exponential(mean, size)
    if dist == "gamma":
        shape = 1.0 / cv**2
        return rng.gamma(shape, mean / shape, size)
    if dist == "weibull":
        k = _weibull_shape(cv)
        return rng.weibull(k, size) * mean / math.gamma(1 + 1 / k)
    if dist == "lognormal":
        s2 = math.log1p(cv**2)
        return rng.lognormal(math.log(mean) - s2 / 2, math.sqrt(s2), size)
    raise ValueError(dist)


def _servegen_files(p: Path) -> list[Path]:
    if p.is_dir():
        files = sorted(p.glob("*.csv"))
        if not files:
            raise InputError("no *.csv client files in the directory", file=str(p))
        return files
    return [p]


def _read_servegen(p: Path, skipped: Counter, seed: int) -> tuple[pd.DataFrame, int]:
    rng = np.random.default_rng(seed)
    parts = []
    n = 0
    for f in _servegen_files(p):
        try:
            raw = pd.read_csv(
                f, header=None, dtype=str, keep_default_na=False, skip_blank_lines=True
            )
        except pd.errors.EmptyDataError:
            continue
        except pd.errors.ParserError as e:
            raise InputError(f"not valid CSV: {str(e).strip()}", file=str(f)) from None
        while raw.shape[1] < 6:
            raw[raw.shape[1]] = ""
        for row in raw.itertuples(index=False):
            n += 1
            try:
                start, rate, cv = float(row[0]), float(row[1]), float(row[2] or 1.0)
            except ValueError:
                skipped["window_start_s/rate/cv not numbers"] += 1
                continue
            dist = str(row[3]).strip().lower()
            if dist not in ("exponential", "poisson", "gamma", "weibull", "lognormal"):
                skipped[f"unknown distribution {dist!r}" if dist else "distribution missing"] += 1
                continue
            if not (math.isfinite(start) and start >= 0 and math.isfinite(rate) and rate >= 0):
                skipped["negative or non-finite window_start_s/rate"] += 1
                continue
            if not (math.isfinite(cv) and cv > 0):
                skipped["cv must be > 0"] += 1
                continue
            try:
                mean_in = float(row[4]) if str(row[4]).strip() else SERVEGEN_DEFAULT_IN_TOKENS
                mean_out = float(row[5]) if str(row[5]).strip() else SERVEGEN_DEFAULT_OUT_TOKENS
            except ValueError:
                skipped["param1/param2 (mean input/output tokens) not numbers"] += 1
                continue
            if mean_in < 1 or mean_out < 1:
                skipped["param1/param2 (mean input/output tokens) below 1"] += 1
                continue
            if rate == 0:
                continue  # an idle window: valid, no arrivals
            expect = rate * SERVEGEN_WINDOW_S
            size = int(expect + 6 * math.sqrt(expect) * max(cv, 1.0) + 16)
            t = np.cumsum(_gaps(dist, rate, cv, size, rng))
            while t[-1] < SERVEGEN_WINDOW_S:  # rare: draw more until past the window
                t = np.concatenate([t, t[-1] + np.cumsum(_gaps(dist, rate, cv, size, rng))])
            t = t[t < SERVEGEN_WINDOW_S]
            k = len(t)
            s_in, s_out = SERVEGEN_SIGMA_IN, SERVEGEN_SIGMA_OUT
            # Lognormal with the given mean: mu = ln(mean) - sigma^2 / 2.
            inp = np.maximum(1, np.rint(rng.lognormal(math.log(mean_in) - s_in**2 / 2, s_in, k)))
            out = np.maximum(1, np.rint(rng.lognormal(math.log(mean_out) - s_out**2 / 2, s_out, k)))
            parts.append(
                pd.DataFrame(
                    {
                        "timestamp": start + t,
                        "model": "",
                        "input_tokens": inp.astype(np.int64),
                        "output_tokens": out.astype(np.int64),
                        "user": f.stem,
                        "session": "",
                        "cached_tokens": 0,
                    }
                )
            )
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({c: [] for c in COLUMNS})
    return df, n


def _read_own(p: Path, fmt: str, skipped: Counter) -> tuple[pd.DataFrame, int]:
    if p.suffix.lower() != f".{fmt}":
        raise InputError(f"--format {fmt} but the file ends in {p.suffix!r}", file=str(p))
    if fmt == "jsonl":
        raw, n = _jsonl_rows(p, skipped)
    else:
        raw, _ = _read_raw(p)
        n = len(raw)
    missing = [
        c for c in ("timestamp", "model", "input_tokens", "output_tokens") if c not in raw.columns
    ]
    if missing and len(raw):
        raise InputError(
            f"missing column(s) {missing}", file=str(p), fix="see `planner schema trace`"
        )
    m = len(raw)
    ts_col = raw["timestamp"] if m else pd.Series([], dtype=float)
    num = pd.to_numeric(ts_col, errors="coerce")
    iso = bool(m) and num.isna().all() and ts_col.notna().any()
    df = _clean(
        {
            "timestamp": ts_col if iso else num.to_numpy(dtype="float64", na_value=np.nan),
            "model": _to_str(raw.get("model"), m),
            "model_required": True,
            "input_tokens": _to_num(raw.get("input_tokens"), m),
            "output_tokens": _to_num(raw.get("output_tokens"), m),
            "cached_tokens": np.nan_to_num(_to_num(raw.get("cached_tokens"), m), nan=0.0)
            if "cached_tokens" in raw.columns
            else np.zeros(m),
            "user": _to_str(raw.get("user"), m),
            "session": _to_str(raw.get("session"), m),
        },
        m,
        skipped,
        iso=iso,
    )
    return df, n


def _json_lines(p: Path, skipped: Counter) -> Iterator[dict | None]:
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


def _jsonl_rows(p: Path, skipped: Counter) -> tuple[pd.DataFrame, int]:
    rows, n = [], 0
    for obj in _json_lines(p, skipped):
        n += 1
        if obj is not None:
            rows.append(obj)
    return pd.DataFrame(rows), n


def _csv(p: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(p, dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise InputError("the file is empty", file=str(p)) from None
    except pd.errors.ParserError as e:
        raise InputError(f"not valid CSV: {str(e).strip()}", file=str(p)) from None


def _need(raw: pd.DataFrame, cols: list[str], p: Path) -> None:
    raw.columns = [str(c).strip() for c in raw.columns]
    missing = [c for c in cols if c not in raw.columns]
    if missing:
        raise InputError(
            f"missing column(s) {missing}; found {list(raw.columns)}",
            file=str(p),
            fix="check --format",
        )


def import_trace(
    fmt: str,
    src: str | Path,
    *,
    model_names: list[str] | None = None,
    assign: str | None = None,
    seed: int = 0,
) -> tuple[pd.DataFrame, ImportSummary]:
    """Read `src` in format `fmt` into a canonical trace and say what happened."""
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}", fix=f"use one of {', '.join(FORMATS)}")
    p = Path(src)
    if not p.exists():
        raise InputError("file not found", file=str(p), fix="check the path")
    if p.is_dir() and fmt != "servegen":
        raise InputError("is a directory", file=str(p), fix="give a file")
    skipped: Counter = Counter()
    summary = ImportSummary(format=fmt, source=str(p))
    if fmt == "azure":
        df, n = _read_azure(p, skipped)
    elif fmt == "burstgpt":
        df, n = _read_burstgpt(p, skipped)
    elif fmt == "mooncake":
        df, n = _read_mooncake(p, skipped)
        summary.rules.append(
            f"cached_tokens: longest prefix of hash_ids seen earlier x {MOONCAKE_BLOCK_TOKENS}"
        )
    elif fmt == "servegen":
        df, n = _read_servegen(p, skipped, seed)
        summary.rules.append(
            "arrivals: renewal process per 600 s window from (rate, cv, distribution); "
            f"lengths lognormal around param1/param2 (seed {seed})"
        )
    else:
        df, n = _read_own(p, fmt, skipped)
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
