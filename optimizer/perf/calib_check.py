"""The held-out checks of a closed-loop calibration (`calib_loop.calibrate_loop`): folds
of the imported runs, leave one configuration (or run) out and leave one model out, and
the held-out TTFT and TPOT error of fitting a set of factors without each fold.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_FOLDS = 6  # configurations are merged round-robin into at most this many folds
CROSS_MODEL = "leave one model out"  # the split of runs of several models


def held_out_error(rel: np.ndarray) -> np.ndarray:
    """What a check scores: TTFT's and TPOT's median |relative error|, each apart."""
    return np.array([np.median(rel[:, 0]), np.median(rel[:, 1])])


def folds_by(keys: list, limit: int = MAX_FOLDS) -> list[np.ndarray]:
    """Index arrays of the folds: one per distinct key, merged round-robin into `limit`."""
    distinct = sorted(set(keys), key=str)
    slot = {k: i % limit for i, k in enumerate(distinct)}
    n = min(limit, len(distinct))
    return [np.array([i for i, k in enumerate(keys) if slot[k] == f]) for f in range(n)]


@dataclass
class Check:
    """A cross-validation split: its folds, and each point's held-out (TTFT, TPOT) |relative
    error| under each factor set."""

    split: str
    folds: list[np.ndarray]
    rels: dict[frozenset, np.ndarray] = field(default_factory=dict)


def held_out_rel(problem: Any, names: list[str], check: Check) -> np.ndarray:
    """Each point's held-out (TTFT, TPOT) |relative error| of fitting `names` on all but its
    fold and predicting it, shape (n, 2) (memoized)."""
    key = frozenset(names)
    if key not in check.rels:
        n = len(problem.loop)
        pred = np.empty((n, 2))
        for held in check.folds:
            train = np.setdiff1d(np.arange(n), held)
            x = problem.fit(sorted(names), train).x
            pred[held] = problem.predict(x, held)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.nan_to_num(np.abs(pred / problem.y - 1), nan=9.0, posinf=9.0)
        check.rels[key] = rel
    return check.rels[key]


def cross_validate(problem: Any, names: list[str], check: Check) -> np.ndarray:
    """Held-out (TTFT, TPOT) error of fitting `names` on all but each fold and predicting it."""
    return held_out_error(held_out_rel(problem, names, check))


def fold_errors(problem: Any, names: list[str], check: Check) -> np.ndarray:
    """The held-out (TTFT, TPOT) error of each fold apart, shape (folds, 2)."""
    rel = held_out_rel(problem, names, check)
    return np.array([held_out_error(rel[held]) for held in check.folds])


def checks_for(points: list) -> list[Check]:
    """Leave one configuration out (one point out where the runs hold fewer than three
    configurations), and leave one model out where they hold several."""
    out = []
    configs = [p.config for p in points]
    if len(set(configs)) >= 3:
        out.append(Check("leave one configuration out", folds_by(configs)))
    elif len(points) >= 3:
        out.append(Check("leave one run out", folds_by(list(range(len(points))))))
    models = [p.arch.name for p in points]
    if len(set(models)) >= 2:
        out.append(Check(CROSS_MODEL, folds_by(models)))
    return out
