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
   back as far as needed for the profile to expect `min_requests` requests (at most a day):
   traffic that fell to a quarter gives a level of about 0.25 whatever the hour, so a quiet
   night does not forget that the afternoon before was a quarter of the usual one, and a
   morning's first busy hour after the fall is forecast a quarter too. Rising traffic raises
   it the same way: drift both ways.
   Forecast = profile x level (clamped to [LEVEL_MIN, LEVEL_MAX]); a model the profile
   expects nothing of (adopted since) goes on at its last windows' rate.

Traffic (`forecast_traffic`): each model's requests of each forecast window drawn from its
requests in the same window a day earlier (the nearest earlier day that has some, else its
last day of requests), thinned or repeated to the forecast count, deterministically (seeded
by the window's time of day). Timestamps keep their offset in the window, so the simulation sees
the clock hours (awake hours) the points were fitted to. Whole sessions are not kept
together: a forecast knows how many requests come, not which session hands off to which.
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
WEEK_WEIGHT = 2.0  # the same slot a week earlier counts this many days (the hour of the week)


@dataclass(frozen=True)
class Forecast:
    """The next windows' expected requests per model, and what they were made of."""

    start_s: float  # the first forecast window's start (the decision's time), s
    window_s: float
    counts: dict[str, np.ndarray]  # model -> expected requests in each forecast window
    level: dict[str, float]  # model -> observed / profile over the recent windows
    log_days: int  # days of request log the profile read

    def total(self) -> np.ndarray:
        """Expected requests in each forecast window, all models."""
        n = len(next(iter(self.counts.values()), np.zeros(0)))
        return np.sum([c for c in self.counts.values()], axis=0) if self.counts else np.zeros(n)

    def to_json(self) -> dict[str, Any]:
        return {
            "window_requests": [round(float(x), 1) for x in self.total()],
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
    num, den, days = np.zeros(len(starts)), 0.0, 0
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
    counts, level, days = {}, {}, 0
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
        n = int(np.searchsorted(cum, cfg.min_requests)) + 1
        exp_, obs_ = float(cum[min(n, len(cum)) - 1]), float(np.nansum(seen[:n]))
        lvl = (obs_ + 1.0) / (exp_ + 1.0) if exp_ > 0 or obs_ > 0 else 1.0
        level[m] = float(np.clip(lvl, LEVEL_MIN, LEVEL_MAX))
        counts[m] = prof_ahead * level[m]
        if exp_ < 1.0 and obs_ > 0:  # a model the profile does not know (just adopted):
            recent = seen[:k][~np.isnan(seen[:k])]  # its last logged windows' rate goes on
            counts[m] = np.full(k, float(recent.mean()) if len(recent) else 0.0)
    return Forecast(now_s, w, counts, level, days)


def forecast_traffic(history: pd.DataFrame, fc: Forecast) -> pd.DataFrame:
    """Requests standing for the forecast windows (module docstring), sorted by time."""
    w = fc.window_s
    ts = history["timestamp"].to_numpy(float)
    models = history["model"].astype(str).to_numpy()
    parts = []
    for m, counts in sorted(fc.counts.items()):
        mine = np.flatnonzero(models == m)
        if not len(mine):
            continue
        for i, expected in enumerate(counts):
            start = fc.start_s + i * w
            # seeded by the window's time of day: live (epoch s) and replay (trace s) draw alike
            rng = np.random.default_rng([int(start % DAY_S), len(parts), i])
            n = int(np.floor(expected + rng.random()))  # unbiased rounding
            if n <= 0:
                continue
            pool = _pool(ts, mine, start, w)
            pick = rng.choice(pool, size=n, replace=n > len(pool))
            rows = history.iloc[np.sort(pick)].copy()
            # the same offset in the window (mod the window), on the forecast's clock
            rows["timestamp"] = start + np.mod(rows["timestamp"].to_numpy(float), w)
            parts.append(rows)
    if not parts:
        return history.iloc[0:0].copy()
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values("timestamp", kind="stable").reset_index(drop=True)


def _pool(ts: np.ndarray, mine: np.ndarray, start: float, w: float) -> np.ndarray:
    """Rows (indices into the log) a model's requests in the window at `start` are drawn
    from: the same window on the nearest earlier day that has some, else its last day."""
    t = ts[mine]
    for d in range(1, 8):
        lo, hi = np.searchsorted(t, [start - d * DAY_S, start - d * DAY_S + w])
        if hi > lo:
            return mine[lo:hi]
    lo = np.searchsorted(t, t[-1] - DAY_S)
    return mine[lo:]


__all__ = ["Forecast", "forecast_counts", "forecast_traffic"]
