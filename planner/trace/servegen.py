"""The servegen format: per-client rate windows, turned into requests (a renewal process
per window, lognormal lengths; planner/trace/importers.py documents the format)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner.errors import InputError
from planner.trace.frame import COLUMNS

SERVEGEN_WINDOW_S = 600.0
SERVEGEN_DEFAULT_IN_TOKENS = 1024.0
SERVEGEN_DEFAULT_OUT_TOKENS = 256.0
SERVEGEN_SIGMA_IN = 1.0
SERVEGEN_SIGMA_OUT = 0.8


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


@dataclass(frozen=True)
class _Window:
    """One row of a ServeGen client file: an arrival process over one window."""

    start_s: float
    rate: float  # requests/s
    cv: float  # of the inter-arrival gaps
    dist: str
    mean_in: float  # tokens
    mean_out: float


def _window(row: tuple[Any, ...], skipped: Counter[str]) -> _Window | None:
    """The row's window; None (the reason counted in `skipped`) for a row that is not one."""
    try:
        start = float(row[0])
        rate = float(row[1])
        cv = float(row[2] or 1.0)
    except ValueError:
        skipped["window_start_s/rate/cv not numbers"] += 1
        return None
    dist = str(row[3]).strip().lower()
    if dist not in ("exponential", "poisson", "gamma", "weibull", "lognormal"):
        skipped[f"unknown distribution {dist!r}" if dist else "distribution missing"] += 1
        return None
    if not (math.isfinite(start) and start >= 0 and math.isfinite(rate) and rate >= 0):
        skipped["negative or non-finite window_start_s/rate"] += 1
        return None
    if not (math.isfinite(cv) and cv > 0):
        skipped["cv must be > 0"] += 1
        return None
    try:
        mean_in = float(row[4]) if str(row[4]).strip() else SERVEGEN_DEFAULT_IN_TOKENS
        mean_out = float(row[5]) if str(row[5]).strip() else SERVEGEN_DEFAULT_OUT_TOKENS
    except ValueError:
        skipped["param1/param2 (mean input/output tokens) not numbers"] += 1
        return None
    if mean_in < 1 or mean_out < 1:
        skipped["param1/param2 (mean input/output tokens) below 1"] += 1
        return None
    return _Window(start, rate, cv, dist, mean_in, mean_out)


def _window_requests(w: _Window, rng: np.random.Generator, user: str) -> pd.DataFrame:
    """The requests of one window: arrivals of its process, lognormal token counts."""
    expect = w.rate * SERVEGEN_WINDOW_S
    size = int(expect + 6 * math.sqrt(expect) * max(w.cv, 1.0) + 16)
    t = np.cumsum(_gaps(w.dist, w.rate, w.cv, size, rng))
    while t[-1] < SERVEGEN_WINDOW_S:  # rare: draw more until past the window
        t = np.concatenate([t, t[-1] + np.cumsum(_gaps(w.dist, w.rate, w.cv, size, rng))])
    t = t[t < SERVEGEN_WINDOW_S]
    k = len(t)
    s_in, s_out = SERVEGEN_SIGMA_IN, SERVEGEN_SIGMA_OUT
    # Lognormal with the given mean: mu = ln(mean) - sigma^2 / 2.
    inp = np.maximum(1, np.rint(rng.lognormal(math.log(w.mean_in) - s_in**2 / 2, s_in, k)))
    out = np.maximum(1, np.rint(rng.lognormal(math.log(w.mean_out) - s_out**2 / 2, s_out, k)))
    return pd.DataFrame(
        {
            "timestamp": w.start_s + t,
            "model": "",
            "input_tokens": inp.astype(np.int64),
            "output_tokens": out.astype(np.int64),
            "user": user,
            "session": "",
            "cached_tokens": 0,
        }
    )


def read_servegen(p: Path, skipped: Counter[str], seed: int) -> tuple[pd.DataFrame, int]:
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
            w = _window(row, skipped)
            if w is not None and w.rate > 0:  # rate 0: an idle window, valid, no arrivals
                parts.append(_window_requests(w, rng, f.stem))
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({c: [] for c in COLUMNS})
    return df, n
