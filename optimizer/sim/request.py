"""Requests as flat arrays: the trace the simulator replays and the outcome of each request.

A trace arrives as the canonical DataFrame of `planner.trace.frame` (or a mapping of arrays with
the same column names) and is turned once into numpy arrays; the simulator never touches
pandas rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Requests:
    """A trace as arrays, sorted by arrival."""

    arrival_s: np.ndarray  # float64, seconds
    model: np.ndarray  # int64 index into model_names
    model_names: tuple[str, ...]
    input_tokens: np.ndarray  # int64, >= 1
    output_tokens: np.ndarray  # int64, >= 1
    cached_tokens: np.ndarray  # int64, 0..input_tokens
    session: np.ndarray  # int64 key of (user, session); -1: unknown, no prefix reuse

    def __len__(self) -> int:
        return len(self.arrival_s)

    @cached_property
    def fingerprint(self) -> bytes:
        """A digest of the trace's values, which the simulator's caches key by: an equal trace
        (another object) shares their entries, and a freed trace's reused `id()` cannot alias
        one. Computed once, on first use: the arrays must not be written after that."""
        import hashlib

        h = hashlib.blake2b(repr(self.model_names).encode(), digest_size=16)
        for a in (
            self.arrival_s,
            self.model,
            self.input_tokens,
            self.output_tokens,
            self.cached_tokens,
            self.session,
        ):
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(np.ascontiguousarray(a).data)
        return h.digest()


def _column(trace: Any, name: str) -> np.ndarray | None:
    if isinstance(trace, Mapping):
        v = trace.get(name)
        return None if v is None else np.asarray(v)
    if name in getattr(trace, "columns", ()):
        return trace[name].to_numpy()
    return None


def _factorize(trace: Any, name: str, n: int) -> tuple[np.ndarray, list[str]]:
    """(int codes in order of first appearance, the distinct values) of a text column,
    missing values as "" (a column that is absent: all ""). Factorizing the column as it
    is (Arrow-backed strings included) avoids a Python object per row."""
    import pandas as pd

    if isinstance(trace, Mapping) or name not in getattr(trace, "columns", ()):
        raw = _column(trace, name)
        col = pd.Series(raw if raw is not None else np.full(n, "", dtype=object), dtype=object)
        col = col.fillna("").astype(str)
    else:
        col = trace[name]
        col = col.fillna("") if str(col.dtype) != "object" else col.fillna("").astype(str)
    codes, uniques = pd.factorize(col, sort=False)
    return codes.astype(np.int64), [str(u) for u in uniques]


def to_requests(trace: Any, model_names: Sequence[str] | None = None) -> Requests:
    """The trace (DataFrame, mapping of arrays, or Requests) as sorted arrays.

    Callers that simulate the same trace many times convert it once and pass the
    `Requests`. `model_names` fixes the model index order (models absent from it are
    appended in order of appearance). Sessions key prefix reuse: (user, session) when
    either is given, none otherwise.
    """
    if isinstance(trace, Requests):
        return trace
    import pandas as pd

    t = np.asarray(_column(trace, "timestamp"), dtype=np.float64)
    n = len(t)
    codes, uniques = _factorize(trace, "model", n)
    names = list(model_names or [])
    for m in uniques:
        if m not in names:
            names.append(m)
    index = {m: i for i, m in enumerate(names)}
    model = (
        np.array([index[m] for m in uniques], dtype=np.int64)[codes] if n else np.zeros(0, np.int64)
    )
    inp = np.asarray(_column(trace, "input_tokens"), dtype=np.int64)
    out = np.asarray(_column(trace, "output_tokens"), dtype=np.int64)
    cached = _column(trace, "cached_tokens")
    cached = np.zeros(n, np.int64) if cached is None else np.asarray(cached, dtype=np.int64)
    # (user, session) pairs as one int key each, numbered in order of first appearance
    user, users = _factorize(trace, "user", n)
    sess, sessions = _factorize(trace, "session", n)
    no_user = users.index("") if "" in users else -1
    no_sess = sessions.index("") if "" in sessions else -1
    known = (user != no_user) | (sess != no_sess)
    session = np.full(n, -1, dtype=np.int64)
    if known.any():
        pair = user[known] * len(sessions) + sess[known]
        session[known] = pd.factorize(pair, sort=False)[0]
    order = np.argsort(t, kind="stable")
    if not np.all(order == np.arange(n)):
        t, model, inp, out, cached, session = (
            a[order] for a in (t, model, inp, out, cached, session)
        )
    return Requests(
        arrival_s=t,
        model=model,
        model_names=tuple(names),
        input_tokens=inp,
        output_tokens=np.maximum(out, 1),
        cached_tokens=np.clip(cached, 0, np.maximum(inp - 1, 0)),
        session=session,
    )


@dataclass
class Outcome:
    """What happened to every request (NaN where a request was not served)."""

    first_token_s: np.ndarray  # absolute time of the first token
    finish_s: np.ndarray  # absolute time of the last token
    switch_wait_s: np.ndarray  # time spent waiting for a wake, s (0: none)
    instance: np.ndarray  # index of the serving instance, -1: none (failed)
    cache_hit: np.ndarray  # bool: the cached prefix was reused
    substituted: np.ndarray  # bool: a stand-in model answered
    quality_penalty: np.ndarray  # the stand-in's quality penalty (0: the model itself)
    refused: np.ndarray  # bool: refused, the model's admission bound was reached

    @classmethod
    def empty(cls, n: int) -> Outcome:
        """All requests unserved."""
        return cls(
            first_token_s=np.full(n, np.nan),
            finish_s=np.full(n, np.nan),
            switch_wait_s=np.zeros(n),
            instance=np.full(n, -1, dtype=np.int64),
            cache_hit=np.zeros(n, dtype=bool),
            substituted=np.zeros(n, dtype=bool),
            quality_penalty=np.zeros(n),
            refused=np.zeros(n, dtype=bool),
        )
