"""The traffic of the next hours, per model: what the lean decision (policy_lean.py) scores
every point on. Pure: no files, no clock.

Rates (`forecast_counts`), per model and each of the next `forecast_windows` windows:
1. a profile: the window's slot of the day (hour of day for 1 h windows) as the request
   log had it on each of its last `history_days` days (the same slot a week earlier counts
   twice: the hour of the week), blended with the plan's fitted rate at that hour of day
   (`workload_summary.rate_per_hour_of_day`) by how much data there is: d days of log weigh
   d against the plan's one (a fresh plan's first hours follow its fit, a week of log
   follows the log);
2. a level: the requests of the last windows over the profile of those same windows, going
   back as far as needed for the profile to expect `min_requests` requests, at least
   LEVEL_MIN_WINDOWS (one session's burst is no level) and at most a day:
   traffic that fell to a quarter gives a level of about 0.25 whatever the hour, so a quiet
   night does not forget that the afternoon before was a quarter of the usual one, and a
   morning's first busy hour after the fall is forecast a quarter too. Rising traffic raises
   it the same way: drift both ways.
   Forecast = profile x level (clamped to [LEVEL_MIN, LEVEL_MAX]); a model the profile
   expects nothing of (adopted since) goes on at its last windows' rate.

Traffic (`forecast_traffic`): each forecast window is drawn from the same window a day
earlier (the nearest earlier day that has requests; without one, the last window that has
some), whole sessions at a time so that their prefix caches and hand-offs stay as they were:
a session is kept (or repeated, a few seconds later) with the mean ratio of forecast to
source requests of the models it calls, deterministically (seeded by the window's time of
day); a model the forecast expects and that window lacks (adopted since) is drawn from its
own last window. Timestamps move by whole days (or windows), so the simulation sees the
clock hours (awake hours) the points were fitted to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from planner.adjuster.policy_types import DAY_S, AdjustConfig

LEVEL_MIN, LEVEL_MAX = 0.05, 20.0  # the level's clamp: a model's traffic x1/20 .. x20
LEVEL_BACK_WINDOWS = 24  # the level reads at most this many windows back
LEVEL_MIN_WINDOWS = 6  # ... and at least this many: agents' sessions come in bursts
WEEK_WEIGHT = 2.0  # the same slot a week earlier counts this many days (the hour of the week)


@dataclass(frozen=True)
class Forecast:
    """The next windows' expected requests per model, and what they were made of."""

    start_s: float  # the first forecast window's start (the decision's time), s
    window_s: float
    counts: dict[str, np.ndarray]  # model -> expected requests in each forecast window
    level: dict[str, float]  # model -> observed / profile over the recent windows
    log_days: int  # days of request log the profile read
    # the plan's fitted requests in the same windows, all models (None: not known)
    fitted: np.ndarray | None = None

    def share(self, min_fitted: float = 1.0) -> float | None:
        """The forecast's requests over the plan's fitted ones in its windows (a quiet rung's
        `for_traffic_share` is read against it); None when the fit expects fewer than
        `min_fitted` there (a ratio of a handful of requests is noise)."""
        if self.fitted is None or float(self.fitted.sum()) < max(min_fitted, 1e-9):
            return None
        return float(self.total().sum()) / float(self.fitted.sum())

    def total(self) -> np.ndarray:
        """Expected requests in each forecast window, all models."""
        n = len(next(iter(self.counts.values()), np.zeros(0)))
        return np.sum([c for c in self.counts.values()], axis=0) if self.counts else np.zeros(n)

    def to_json(self) -> dict[str, Any]:
        share = self.share()
        return {
            "window_requests": [round(float(x), 1) for x in self.total()],
            "share_of_fit": round(share, 3) if share is not None else None,
            "level": {m: round(v, 3) for m, v in sorted(self.level.items())},
            "log_days": self.log_days,
        }


def _slot_counts(history: pd.DataFrame, model: str, starts: np.ndarray, w: float) -> np.ndarray:
    """Requests of `model` in `[s, s + w)` for each start s of `starts`."""
    ts = history["timestamp"].to_numpy(float)[history["model"].astype(str).to_numpy() == model]
    return np.searchsorted(ts, starts + w) - np.searchsorted(ts, starts)


def _plan_rate(summary: Mapping[str, Any], model: str, starts: np.ndarray, w: float) -> np.ndarray:
    """The plan's fitted requests of `model` in each window (its hour-of-day rate x hours)."""
    per_h = (summary.get("rate_per_hour_of_day") or {}).get(model)
    if not per_h:
        return np.zeros(len(starts))
    hour = ((starts % DAY_S) // 3600).astype(int) % 24
    return np.asarray(per_h, float)[hour] * (w / 3600.0)


def _profile(
    history: pd.DataFrame,
    first_s: float,
    summary: Mapping[str, Any],
    model: str,
    starts: np.ndarray,
    cfg: AdjustConfig,
) -> tuple[np.ndarray, int]:
    """(the profile's expected requests in each window of `starts`, days of log it read)."""
    w = cfg.window_s
    num = np.zeros(len(starts))
    den = 0.0
    days = 0
    for d in range(1, int(cfg.history_days) + 1):
        past = starts - d * DAY_S
        if past.min() < first_s:  # the log does not reach back that far (whole days only)
            break
        weight = WEEK_WEIGHT if d == 7 else 1.0
        num += weight * _slot_counts(history, model, past, w)
        den += weight
        days = d
    plan = _plan_rate(summary, model, starts, w)
    has_plan = bool((summary.get("rate_per_hour_of_day") or {}).get(model))
    if den == 0 and not has_plan:  # no day of log and a model the plan never saw
        return np.zeros(len(starts)), 0
    # d days of log weigh d against the plan's fit, which counts as one day
    return (num + (1.0 if has_plan else 0.0) * plan) / (den + (1.0 if has_plan else 0.0)), days


def forecast_counts(
    history: pd.DataFrame,
    first_s: float | None,
    summary: Mapping[str, Any],
    now_s: float,
    cfg: AdjustConfig,
    models: list[str],
) -> Forecast:
    """Expected requests per model in each of the next `forecast_windows` windows (module
    docstring). `history`: the log's requests of the last `history_days` (sorted by time);
    `first_s`: when the log's first request arrived; `summary`: the plan's workload_summary."""
    w, k = cfg.window_s, max(cfg.forecast_windows, 1)
    ahead = now_s + w * np.arange(k)
    back = now_s - w * np.arange(1, LEVEL_BACK_WINDOWS + 1)  # the last windows, newest first
    first = first_s if first_s is not None else now_s
    counts = {}
    level = {}
    days = 0
    for m in models:
        prof_ahead, days_m = _profile(history, first, summary, m, ahead, cfg)
        days = max(days, days_m)
        prof_back, _ = _profile(history, first, summary, m, back, cfg)
        seen = _slot_counts(history, m, back, w).astype(float)
        seen[back < first - w] = np.nan  # before the log began: unknown, not quiet
        # go back until the profile expects `min_requests` (all models' share of it: the
        # model's own profile), at most LEVEL_BACK_WINDOWS windows
        ok = ~np.isnan(seen)
        cum = np.cumsum(np.where(ok, prof_back, 0.0))
        n = max(int(np.searchsorted(cum, cfg.min_requests)) + 1, LEVEL_MIN_WINDOWS)
        exp_, obs_ = float(cum[min(n, len(cum)) - 1]), float(np.nansum(seen[:n]))
        lvl = (obs_ + 1.0) / (exp_ + 1.0) if exp_ > 0 or obs_ > 0 else 1.0
        level[m] = float(np.clip(lvl, LEVEL_MIN, LEVEL_MAX))
        counts[m] = prof_ahead * level[m]
        if exp_ < 1.0 and obs_ > 0:  # a model the profile does not know (just adopted):
            recent = seen[:k][~np.isnan(seen[:k])]  # its last logged windows' rate goes on
            counts[m] = np.full(k, float(recent.mean()) if len(recent) else 0.0)
    fitted = np.zeros(k)
    for m in models:
        fitted += _plan_rate(summary, m, ahead, w)
    return Forecast(now_s, w, counts, level, days, fitted)


def forecast_traffic(history: pd.DataFrame, fc: Forecast) -> pd.DataFrame:
    """Requests standing for the forecast windows (module docstring), sorted by time."""
    w = fc.window_s
    ts = history["timestamp"].to_numpy(float)
    models_all = history["model"].astype(str).to_numpy()
    parts: list[pd.DataFrame] = []
    for i in range(len(fc.total())):
        start = fc.start_s + i * w
        want = {m: float(c[i]) for m, c in fc.counts.items()}
        # seeded by the window's time of day: live (epoch s) and replay (trace s) draw alike
        rng = np.random.default_rng([int(start % DAY_S), i])
        src = _source(history, ts, start, w, fc.start_s, None)
        have = src[0]["model"].astype(str).value_counts().to_dict() if src is not None else {}
        if src is not None:
            _draw(*src, want, parts, rng)
        for m in sorted(m for m, n in want.items() if n >= 0.5 and not have.get(m)):
            # a model the source window lacks (adopted since): from its own last window
            alone = _source(history, ts, start, w, fc.start_s, models_all == m)
            if alone is not None:
                _draw(*alone, {m: want[m]}, parts, rng)
    if not parts:
        return history.iloc[0:0].copy()
    out = pd.concat(parts, ignore_index=True)
    end = fc.start_s + len(fc.total()) * w
    out = out[(out["timestamp"] >= fc.start_s) & (out["timestamp"] < end)]
    return out.sort_values("timestamp", kind="stable").reset_index(drop=True)


def _draw(rows: pd.DataFrame, shift: float, want: dict[str, float], parts: list, rng: Any) -> None:
    """Append to `parts` the sessions of `rows` kept or repeated to `want` (model -> requests),
    moved by `shift` s: a session's share is the mean ratio forecast / source of the models
    it calls."""
    have = rows["model"].astype(str).value_counts().to_dict()
    ratio = {m: want.get(m, 0.0) / n for m, n in have.items() if n}
    sess = rows["session"].astype(str).to_numpy()
    models = rows["model"].astype(str).to_numpy()
    share = pd.Series([ratio[m] for m in models]).groupby(sess).mean().to_dict()
    for s_id in sorted(share):
        r = share[s_id]
        copies = int(np.floor(r)) + int(rng.random() < r - np.floor(r))
        mine = rows[sess == s_id]
        for c in range(copies):  # a copy is another session like it, a little later
            part = mine.assign(timestamp=mine["timestamp"].to_numpy(float) + shift + c * 7.0)
            parts.append(part.assign(session=f"{s_id}~{c}") if c else part)


def _source(
    history: pd.DataFrame, ts: np.ndarray, start: float, w: float, now_s: float, only: Any
) -> tuple[pd.DataFrame, float] | None:
    """(the requests a forecast window at `start` is drawn from, the shift onto it, s): the
    same window on the nearest earlier day that has some, else the last window that has
    some (its sessions whole: their prefix caches and hand-offs as they were). `only`: a
    mask of the log's rows to draw from (None: all)."""
    spans = [(start - d * DAY_S, d * DAY_S) for d in range(1, 8)]
    spans += [(now_s - j * w, start - (now_s - j * w)) for j in range(1, 25)]
    for a, shift in spans:
        lo, hi = (int(x) for x in np.searchsorted(ts, [a, a + w]))
        if hi > lo and (only is None or only[lo:hi].any()):
            rows = history.iloc[lo:hi]
            return (rows if only is None else rows[only[lo:hi]]), shift
    return None


__all__ = ["Forecast", "forecast_counts", "forecast_traffic"]
