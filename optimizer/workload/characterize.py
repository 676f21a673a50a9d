"""Workload characterization (pure): a trace frame in, a compact summary out.

The summary is a plain JSON/YAML-able dict (`WorkloadSummary`). A plan stores it as
`workload_summary`: it is what the plan was optimized for and the drift reference.
Conventions:

- Hour of day is `(timestamp mod 86400) // 3600`: timestamps count seconds from 00:00 UTC
  of the trace's first day (synth and ISO imports both do).
- A "session stream" is the session column; rows without a session fall back to their user,
  and rows with neither form one stream. Switches and gaps are measured between
  consecutive calls of one stream.
- Rates are requests per hour; `rate_per_hour_of_day[m][h]` is the mean over the clock
  hours at hour-of-day h that the trace spans (from its first to its last request).
- `idle_arrivals_per_hour[m][j]`: requests to model m that come more than `idle_s[j]`
  seconds after the previous request to m (the first request counts), per hour of the
  trace's duration: how often a model that sleeps after T idle seconds must wake.
- `peak[m]`: the busiest clock hour of m, its request and token rates per second.
- Concurrency counts distinct models / sessions with at least one request in each
  `window_s` window, over the windows that have any request (nights would swamp it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

WorkloadSummary = dict[str, Any]

SUMMARY_VERSION = 1
IDLE_GRID_S = (10, 30, 60, 120, 300, 600, 1800, 3600)
CONCURRENCY_WINDOW_S = 60.0
_MIN_SLOT_REQUESTS = 20  # hourly slots with fewer requests say nothing about noise


def _r(x: float, digits: int = 6) -> float:
    """Round to `digits` significant digits (compact, stable YAML)."""
    x = float(x)
    if x == 0 or not np.isfinite(x):
        return 0.0 if not np.isfinite(x) else x
    return float(f"{x:.{digits}g}")


def _q(a: np.ndarray, qs: tuple[float, ...] = (0.5, 0.95)) -> list[float]:
    return [_r(v) for v in np.quantile(a, qs)] if len(a) else [0.0 for _ in qs]


def _stream_ids(df: pd.DataFrame) -> np.ndarray:
    """Integer id of each row's session stream (session, else user, else one stream)."""
    sess = df["session"].fillna("")
    scode, _ = pd.factorize(sess)
    ucode, _ = pd.factorize(df["user"].fillna(""))
    has = (sess != "").to_numpy(dtype=bool)
    key = np.where(has, scode, scode.max() + 1 + ucode)
    codes, _ = pd.factorize(key)
    return codes.astype(np.int64)


def _count2(
    i: np.ndarray, j: np.ndarray, shape: tuple[int, int], w: np.ndarray | None = None
) -> np.ndarray:
    """Sum of weights (or counts) per (i, j) cell: a fast np.add.at."""
    flat = np.bincount(i * shape[1] + j, weights=w, minlength=shape[0] * shape[1])
    return flat.reshape(shape).astype(float)


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence of two distributions, nats (0..ln 2)."""
    p = np.asarray(p, float)
    q = np.asarray(q, float)
    p = p / p.sum() if p.sum() > 0 else p
    q = q / q.sum() if q.sum() > 0 else q
    m = 0.5 * (p + q)
    with np.errstate(divide="ignore", invalid="ignore"):
        kp = np.where(p > 0, p * np.log(p / m), 0.0).sum()
        kq = np.where(q > 0, q * np.log(q / m), 0.0).sum()
    return float(max(0.0, 0.5 * (kp + kq)))


def hour_slots(ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clock-hour slot of each timestamp and how often each hour of day is spanned."""
    slot = np.floor(ts / 3600.0).astype(np.int64)
    first, last = int(slot.min()), int(slot.max())
    hours = last - first + 1  # clock hours from the first request's to the last's
    # every hour of day is spanned hours // 24 times, the first hours % 24 of them once more
    spanned = hours // 24 + ((np.arange(24) - first) % 24 < hours % 24)
    return slot, spanned.astype(np.int64)


def summarize(df: pd.DataFrame, *, full: bool = False) -> WorkloadSummary:
    """Characterize a canonical trace (planner.trace.frame). `full` adds per-user switch matrices."""
    n = len(df)
    if n == 0:
        return {"version": SUMMARY_VERSION, "requests": 0, "models": []}
    ts = df["timestamp"].to_numpy(dtype=float)
    codes, names = pd.factorize(df["model"].astype(str), sort=True)
    models = [str(m) for m in names]
    k = len(models)
    inp = df["input_tokens"].to_numpy(dtype=np.int64)
    out = df["output_tokens"].to_numpy(dtype=np.int64)
    cached = df["cached_tokens"].to_numpy(dtype=np.int64)
    stream = _stream_ids(df)
    duration_s = max(float(ts.max() - ts.min()), 1.0)
    counts = np.bincount(codes, minlength=k)

    # Rates by hour of day and the busiest clock hour of each model.
    slot, spanned = hour_slots(ts)
    hod = slot % 24
    per_hod = _count2(codes, hod, (k, 24))
    rate_hod = per_hod / np.maximum(spanned, 1)[None, :]
    # Only the clock hours that have requests: memory follows the rows, not the span.
    busy_slots, slot0 = np.unique(slot, return_inverse=True)
    slot_counts = _count2(codes, slot0, (k, len(busy_slots)))
    peak = _peaks(models, codes, busy_slots, slot0, slot_counts, inp, out)
    total_slot = slot_counts.sum(axis=0)

    # Burst size: requests one stream sends a model within one clock hour (mean over the
    # (stream, hour) pairs that have any).
    n_streams = int(stream.max()) + 1
    cells_key = (slot0 * n_streams + stream) * k + codes
    cell_ids, cell_n = np.unique(cells_key, return_counts=True)
    burst = np.bincount(cell_ids % k, weights=cell_n, minlength=k) / np.maximum(
        np.bincount(cell_ids % k, minlength=k), 1
    )
    switch, switch_rate, gaps = _switches(stream, codes, ts, k)
    summary: WorkloadSummary = {
        "version": SUMMARY_VERSION,
        "requests": int(n),
        "start_s": _r(ts.min(), 12),
        "duration_s": _r(duration_s),
        "models": models,
        "users": int(df["user"].nunique()),
        "sessions": n_streams,
        "mix": {m: _r(c / n) for m, c in zip(models, counts, strict=True)},
        "hours_spanned": [int(x) for x in spanned],
        "rate_per_hour_of_day": {m: [_r(x) for x in rate_hod[i]] for i, m in enumerate(models)},
        "peak": peak,
        "peak_hour_requests_per_s": _r(total_slot.max() / 3600.0),
        "lengths": _lengths(models, codes, inp, out, cached),
        "switch": {
            "models": models,
            "counts": switch.tolist(),
            "rate": _r(switch_rate),
        },
        "gap_s_p10_p50_p90_p99": _q(gaps, (0.1, 0.5, 0.9, 0.99)),
        "prefix": _prefix(models, codes, stream, ts, inp, cached),
        "idle_arrivals_per_hour": {
            "idle_s": list(IDLE_GRID_S),
            **_idle_arrivals(models, codes, ts, duration_s),
        },
        "concurrency": _concurrency(ts, codes, stream, k, n_streams),
        "noise": _noise(models, burst, busy_slots, spanned, per_hod, slot_counts, total_slot),
    }
    if full:
        summary["switch_per_user"] = _per_user_switch(df, stream, codes, ts, k)
    return summary


def _peaks(
    models: list[str],
    codes: np.ndarray,
    busy_slots: np.ndarray,
    slot0: np.ndarray,
    slot_counts: np.ndarray,
    inp: np.ndarray,
    out: np.ndarray,
) -> dict[str, dict[str, Any]]:
    """Per model, its busiest clock hour: hour of day, requests and tokens per second."""
    shape = slot_counts.shape
    slot_in = _count2(codes, slot0, shape, inp.astype(float))
    slot_out = _count2(codes, slot0, shape, out.astype(float))
    peak = {}
    for i, m in enumerate(models):
        j = int(slot_counts[i].argmax())
        peak[m] = {
            "hour_of_day": int(busy_slots[j] % 24),
            "requests_per_s": _r(slot_counts[i, j] / 3600.0),
            "input_tokens_per_s": _r(slot_in[i, j] / 3600.0),
            "output_tokens_per_s": _r(slot_out[i, j] / 3600.0),
        }
    return peak


def _lengths(
    models: list[str], codes: np.ndarray, inp: np.ndarray, out: np.ndarray, cached: np.ndarray
) -> dict[str, dict[str, Any]]:
    """Per model: input, output and cached lengths (means, quantiles, lognormal fit)."""
    lengths = {}
    for i, m in enumerate(models):
        sel = codes == i
        li, lo = np.log(inp[sel]), np.log(out[sel])
        lengths[m] = {
            "input_mean": _r(inp[sel].mean()),
            "input_p50_p95": _q(inp[sel]),
            "output_mean": _r(out[sel].mean()),
            "output_p50_p95": _q(out[sel]),
            "cached_mean": _r(cached[sel].mean()),
            "log_input_mean_sd": [_r(li.mean()), _r(li.std())],
            "log_output_mean_sd": [_r(lo.mean()), _r(lo.std())],
        }
    return lengths


def _switches(
    stream: np.ndarray, codes: np.ndarray, ts: np.ndarray, k: int
) -> tuple[np.ndarray, float, np.ndarray]:
    """Consecutive calls of a stream: model-to-model counts, the share that switch model,
    and the gaps between them."""
    order = np.lexsort((ts, stream))
    s_sorted = stream[order]
    m_sorted = codes[order]
    t_sorted = ts[order]
    same = s_sorted[1:] == s_sorted[:-1]
    prev_m, cur_m = m_sorted[:-1][same], m_sorted[1:][same]
    gaps = (t_sorted[1:] - t_sorted[:-1])[same]
    switch = _count2(prev_m, cur_m, (k, k)).astype(np.int64)
    switch_rate = float((prev_m != cur_m).mean()) if len(prev_m) else 0.0
    return switch, switch_rate, gaps


def _prefix(
    models: list[str],
    codes: np.ndarray,
    stream: np.ndarray,
    ts: np.ndarray,
    inp: np.ndarray,
    cached: np.ndarray,
) -> dict[str, dict[str, Any]]:
    """Prefix reuse per model: the cached share of input, and the time since the same
    stream's previous call to the same model of the calls that reuse a prefix."""
    order2 = np.lexsort((ts, codes, stream))
    s2 = stream[order2]
    m2 = codes[order2]
    t2 = ts[order2]
    same2 = (s2[1:] == s2[:-1]) & (m2[1:] == m2[:-1])
    reuse_t = np.full(len(ts), np.nan)
    reuse_t[order2[1:][same2]] = (t2[1:] - t2[:-1])[same2]
    prefix = {}
    for i, m in enumerate(models):
        sel = codes == i
        d = reuse_t[sel & (cached > 0)]
        prefix[m] = {
            "reuse_ratio": _r(cached[sel].sum() / max(inp[sel].sum(), 1)),
            "reuse_distance_s_p50_p95": _q(d[np.isfinite(d)]),
        }
    return prefix


def _idle_arrivals(
    models: list[str], codes: np.ndarray, ts: np.ndarray, duration_s: float
) -> dict[str, list[float]]:
    """Per model, arrivals per hour that find it idle longer than each `IDLE_GRID_S` (the
    optimizer's switch rates)."""
    idle: dict[str, list[float]] = {}
    hours = duration_s / 3600.0
    for i, m in enumerate(models):
        t = np.sort(ts[codes == i])
        gap = np.diff(t)
        # The first request of a model always finds it idle.
        idle[m] = [_r((1 + int((gap > T).sum())) / hours) for T in IDLE_GRID_S]
    return idle


def _concurrency(
    ts: np.ndarray, codes: np.ndarray, stream: np.ndarray, k: int, n_streams: int
) -> dict[str, Any]:
    """Models and sessions active per busy window (distinct (window, model) and (window,
    stream) pairs), as CDFs."""
    w = np.floor(ts / CONCURRENCY_WINDOW_S).astype(np.int64)
    w0 = w - w.min()
    models_active = np.unique(np.unique(w0 * k + codes) // k, return_counts=True)[1]
    sess_active = np.unique(np.unique(w0 * n_streams + stream) // n_streams, return_counts=True)[1]
    return {
        "window_s": CONCURRENCY_WINDOW_S,
        "models_active_cdf": _cdf(models_active),
        "sessions_active_cdf": _cdf(sess_active),
    }


def _cdf(x: np.ndarray) -> list[float]:
    """P(X <= j) for j = 0..max(x)."""
    if len(x) == 0:
        return [1.0]
    c = np.cumsum(np.bincount(x)) / len(x)
    return [_r(v, 4) for v in c]


def _noise(
    models: list[str],
    burst: np.ndarray,
    busy_slots: np.ndarray,
    spanned: np.ndarray,
    per_hod: np.ndarray,
    slot_counts: np.ndarray,
    total_slot: np.ndarray,
) -> dict[str, Any]:
    """How much hourly windows of this trace scatter around its own hour-of-day profile.

    Requests come in bursts (sessions), so counts scatter more than Poisson. `rate[model]`:
    [a, b] of the variance law var(count) = a lam + b lam^2 over that model's clock hours
    with expected count lam >= 5 (a: the burst size, requests one session sends the model in
    an hour; b, fitted: squared hour-to-hour coefficient of variation of the team's activity); `mix`: mean of
    8 n JS / (models - 1) over clock hours (1 for multinomial noise). Both are inflated by
    D/(D-1) since each hour's expectation includes that hour (D hours at that hour of day).
    Drift scales its test statistics by these. `hours` counts the windows used.
    """
    k = len(models)
    hods = busy_slots % 24  # hour of day of each clock hour with requests
    d = spanned[hods].astype(float)
    usable = (d >= 2) & (total_slot >= _MIN_SLOT_REQUESTS)
    if usable.sum() < 3:
        return {"rate": {}, "mix": None, "hours": int(usable.sum())}
    exp = per_hod[:, hods] / np.maximum(d, 1)[None, :]  # expected count per slot
    infl = d / np.maximum(d - 1, 1)
    cells = (exp >= 5) & usable[None, :]
    sq = (slot_counts - exp) ** 2 * infl[None, :]
    rate_var: dict[str, list[float] | None] = {}
    for i in range(k):
        lam, y = exp[i][cells[i]], sq[i][cells[i]]
        if len(lam) < 3:
            rate_var[models[i]] = None
            continue
        # Least squares of y - a lam ~ b lam^2, with a the burst size (requests a session
        # sends the model in an hour): negative-binomial-like variance.
        a = max(float(burst[i]), 1.0)
        b = float(np.dot(y - a * lam, lam**2) / np.dot(lam**2, lam**2))
        rate_var[models[i]] = [_r(a), _r(max(b, 0.0))]
    mix_stats = []
    for j in np.flatnonzero(usable):
        e = exp[:, j]
        kk = int((e > 0).sum())
        if kk < 2:
            continue
        ntot = total_slot[j]
        mix_stats.append(8 * ntot * js_divergence(slot_counts[:, j], e) / (kk - 1) * infl[j])
    mix_phi = float(np.mean(mix_stats)) if mix_stats else None
    return {
        "rate": rate_var,
        "mix": _r(max(mix_phi, 1.0)) if mix_phi is not None else None,
        "hours": int(usable.sum()),
    }


def _per_user_switch(
    df: pd.DataFrame, stream: np.ndarray, codes: np.ndarray, ts: np.ndarray, k: int
) -> dict[str, list[list[int]]]:
    """Switch-count matrix of each user (full characterization only)."""
    ucodes, users = pd.factorize(df["user"].astype(str), sort=True)
    order = np.lexsort((ts, stream))
    s = stream[order]
    m = codes[order]
    u = ucodes[order]
    same = s[1:] == s[:-1]
    mats = np.zeros((len(users), k, k), dtype=np.int64)
    np.add.at(mats, (u[1:][same], m[:-1][same], m[1:][same]), 1)
    return {str(name): mats[i].tolist() for i, name in enumerate(users)}
