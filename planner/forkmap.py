"""Independent jobs over forked worker processes: the optimizer's batches of plan variants.

The optimizer core takes a map (`JobMap`; `serial_map` by default) and never starts a
process itself; the CLI and the benches hand it `fork_map(workers)`. Forked workers inherit
the job function and everything it reads (the traces, the searcher), so nothing is pickled
on the way in; only the results travel back, in order. The numbers are the same as a plain
loop's: each job runs the same deterministic code on the same inputs.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from typing import Any

# job_map(job, n) -> [job(0), ..., job(n - 1)]: how a batch of independent evaluations runs
JobMap = Callable[[Callable[[int], Any], int], list[Any]]
_JOB: Callable[[int], Any] | None = None  # the running map's job, inherited by its workers


def serial_map(job: Callable[[int], Any], n: int) -> list[Any]:
    """`JobMap` in this process, one job after another."""
    return [job(k) for k in range(n)]


def _run(k: int) -> Any:
    assert _JOB is not None
    return _JOB(k)


def default_workers() -> int:
    """Worker processes by default: the CPUs this process may use, at most 4 (a batch of
    variants is rarely longer)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(n, 4))


def fork_map(workers: int) -> JobMap:
    """A map of `job(0) .. job(n - 1)` over up to `workers` forked processes; a plain loop
    with one worker, one job, or where the OS cannot fork."""

    def run(job: Callable[[int], Any], n: int) -> list[Any]:
        global _JOB
        procs = min(workers, n)
        if procs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
            return serial_map(job, n)
        _JOB = job
        try:
            with multiprocessing.get_context("fork").Pool(procs) as pool:
                return pool.map(_run, range(n), chunksize=1)
        finally:
            _JOB = None

    return run


__all__ = ["JobMap", "default_workers", "fork_map", "serial_map"]
