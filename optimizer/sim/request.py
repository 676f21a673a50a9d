"""Requests as flat arrays: the trace the simulator replays and the outcome of each request.

A trace arrives as the canonical DataFrame of `planner.trace` (or a mapping of arrays with
the same column names) and is turned once into numpy arrays; the simulator never touches
pandas rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


def _column(trace: Any, name: str) -> np.ndarray | None:
    if isinstance(trace, Mapping):
        v = trace.get(name)
        return None if v is None else np.asarray(v)
    if name in getattr(trace, "columns", ()):
        col = trace[name]
        if str(col.dtype) == "string":
            return col.fillna("").to_numpy(dtype=object)
        return col.to_numpy()
    return None


def _keys(values: np.ndarray) -> np.ndarray:
    """Dense int codes of hashable values, in order of first appearance (deterministic)."""
    _, first, inv = np.unique(values.astype(str), return_index=True, return_inverse=True)
    # Renumber by first appearance so codes do not depend on string sort order.
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inv].astype(np.int64)


def to_requests(trace: Any, model_names: Sequence[str] | None = None) -> Requests:
    """The trace (DataFrame, mapping of arrays, or Requests) as sorted arrays.

    `model_names` fixes the model index order (models absent from it are appended in order
    of appearance). Sessions key prefix reuse: (user, session) when a session is given, the
    user alone when only a user is, none otherwise.
    """
    if isinstance(trace, Requests):
        return trace
    t = np.asarray(_column(trace, "timestamp"), dtype=np.float64)
    n = len(t)
    raw_model = _column(trace, "model")
    models = np.asarray(raw_model if raw_model is not None else [], dtype=object).astype(str)
    names = list(model_names or [])
    for m in dict.fromkeys(models.tolist()):
        if m not in names:
            names.append(m)
    index = {m: i for i, m in enumerate(names)}
    model = np.fromiter((index[m] for m in models), dtype=np.int64, count=n)
    inp = np.asarray(_column(trace, "input_tokens"), dtype=np.int64)
    out = np.asarray(_column(trace, "output_tokens"), dtype=np.int64)
    cached = _column(trace, "cached_tokens")
    cached = np.zeros(n, np.int64) if cached is None else np.asarray(cached, dtype=np.int64)
    user = _column(trace, "user")
    sess = _column(trace, "session")
    user = np.full(n, "", dtype=object) if user is None else user.astype(object)
    sess = np.full(n, "", dtype=object) if sess is None else sess.astype(object)
    user_s = np.where(pd_isna(user), "", user).astype(str)
    sess_s = np.where(pd_isna(sess), "", sess).astype(str)
    known = (user_s != "") | (sess_s != "")
    session = np.full(n, -1, dtype=np.int64)
    if known.any():
        combo = np.char.add(np.char.add(user_s[known], "\x1f"), sess_s[known])
        session[known] = _keys(combo)
    order = np.argsort(t, kind="stable")
    if not np.all(order == np.arange(n)):
        t, model, inp, out, cached, session = (a[order] for a in (t, model, inp, out, cached, session))
    return Requests(
        arrival_s=t,
        model=model,
        model_names=tuple(names),
        input_tokens=inp,
        output_tokens=np.maximum(out, 1),
        cached_tokens=np.clip(cached, 0, np.maximum(inp - 1, 0)),
        session=session,
    )


def pd_isna(a: np.ndarray) -> np.ndarray:
    """Elementwise None/NaN test on an object array (no pandas import needed)."""
    return np.fromiter((x is None or (isinstance(x, float) and x != x) for x in a), bool, len(a))


@dataclass
class Outcome:
    """What happened to every request (NaN where a request was not served)."""

    first_token_s: np.ndarray  # absolute time of the first token
    finish_s: np.ndarray  # absolute time of the last token
    switch_wait_s: np.ndarray  # time spent waiting for a wake, s (0: none)
    instance: np.ndarray  # index of the serving instance, -1: none (failed)
    cache_hit: np.ndarray  # bool: the cached prefix was reused

    @classmethod
    def empty(cls, n: int) -> Outcome:
        """All requests unserved."""
        return cls(
            first_token_s=np.full(n, np.nan),
            finish_s=np.full(n, np.nan),
            switch_wait_s=np.zeros(n),
            instance=np.full(n, -1, dtype=np.int64),
            cache_hit=np.zeros(n, dtype=bool),
        )
