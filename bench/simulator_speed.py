"""Simulator speed: a 10-user, 7-day synthetic trace on plans/examples/lab16, each baseline.

Prints simulated requests per second of wall time (one core: BLAS threads pinned to 1) and
the wall time of the week (and its CPU time: the machine may be shared), best of `--repeat`
runs with the per-instance memo cleared (cold), and one rerun with it (warm: what an
optimize run sees for instances shared between points). Trace conversion to arrays happens
once, as in an optimize run.

Then the whole process (issue 13): `planner evaluate` from start to exit on a week of lab16's
spec with 132 users (298k requests, written to a temporary Parquet file), against a plan
`planner optimize` wrote for lab16 (every point and its `lru@` twin), and against each
baseline; simulated requests per second per point or baseline = requests x simulations /
wall time (target >= 100,000), the fastest of `--process-repeat` runs, with the CPU time
(user + system) of the same run beside it: on a shared machine the wall time says more
about the neighbours than about the code. A first run fills numba's on-disk cache of the
compiled loops (what a fresh install does once). Ends with RESULT; exit 1 when a target is
missed.

    python bench/simulator_speed.py [--users 10] [--days 7] [--seed 0] [--repeat 9]
        [--process-repeat 3]
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from planner.app.files import silence_solver_banner  # noqa: E402
from planner.optimizer import baselines  # noqa: E402
from planner.optimizer.sim import simulator  # noqa: E402
from planner.optimizer.sim.request import to_requests  # noqa: E402
from planner.optimizer.sim.simulator import simulate  # noqa: E402
from planner.optimizer.workload.synth import synth  # noqa: E402
from planner.optimizer.workload.synth_spec import bind_models, default_spec  # noqa: E402
from planner.schemas import load_cluster, load_models, load_slo  # noqa: E402

LAB = Path(__file__).resolve().parents[1] / "plans" / "examples" / "lab16"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=9)  # a shared VM: the best of many
    ap.add_argument("--process-repeat", type=int, default=3)
    args = ap.parse_args()
    silence_solver_banner()  # melange's MILP would print HiGHS's banner mid-table
    cluster = load_cluster(LAB / "cluster.yaml")
    models = load_models(LAB / "models.yaml")
    slo = load_slo(LAB / "slo.yaml")
    spec, _ = bind_models(
        default_spec().model_copy(update={"users": args.users, "days": args.days}), models.names
    )
    df = synth(spec, seed=args.seed)
    n = len(df)
    print(f"trace: {args.users} users, {args.days} days, {n} requests (lab16, seed {args.seed})")
    a = time.perf_counter()
    req = to_requests(df, models.names)
    conv_s = time.perf_counter() - a
    print(f"trace -> arrays: {conv_s:.3f} s (once per optimize run)")
    out: dict[str, str] = {"requests": str(n)}
    total_s = 0.0
    worst_s = 0.0
    for name in baselines.BASELINES:
        b = baselines.build(name, cluster, models, slo, df)
        best = cpu = float("inf")
        kw = b.simulate_kwargs()
        for _ in range(args.repeat):
            simulator.clear_caches()  # cold: nothing remembered from earlier points
            t0, c0 = time.perf_counter(), time.process_time()
            r = simulate(b.point, b.perfs, req, slo, model_names=models.names, **kw)
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        t0 = time.perf_counter()  # warm: instances seen before (as in an optimize run)
        simulate(b.point, b.perfs, req, slo, model_names=models.names, **kw)
        warm = time.perf_counter() - t0
        m = r.to_metrics()
        rps = n / best
        total_s += best
        worst_s = max(worst_s, best)
        print(
            f"{name:8s} {best:7.3f} s/week ({cpu:.3f} s CPU)  {rps:8.0f} req/s  SLO met {m['slo_attainment']:.3f}  "
            f"switches {m['switch_count']}  warm {m['warm_gpu_gib']:.1f} GiB  "
            f"busy {r.gpu_busy_fraction:.3f}  preemptions {r.preemptions}  "
            f"warm-cache rerun {warm:.3f} s"
        )
        out[f"{name}_rps"] = f"{rps:.0f}"
        out[f"{name}_week_s"] = f"{best:.3f}"
        out[f"{name}_cpu_rps"] = f"{n / cpu:.0f}"
        out[f"{name}_warm_rps"] = f"{n / warm:.0f}"
    out["total_s"] = f"{total_s:.3f}"
    out["min_rps"] = f"{min(float(out[f'{k}_rps']) for k in baselines.BASELINES):.0f}"
    out["week_le_3s"] = str(worst_s <= 3.0).lower()
    out.update(whole_process(models, args.process_repeat))
    met = out["week_le_3s"] == "true" and out["process_ge_100k"] == "true"
    out["met"] = str(met).lower()
    print("RESULT " + " ".join(f"{k}={v}" for k, v in out.items()))
    sys.exit(0 if met else 1)


BIG_USERS = 132  # 298k requests in lab16's week


def _planner(*args: str) -> tuple[float, dict, float]:
    """Run `planner ARGS --json` as a user would; (wall s, its JSON, its CPU s: user +
    system, which a shared machine inflates less than the wall time)."""
    cmd = [sys.executable, "-m", "planner.cli.main", *args, "--json"]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, json.loads(p.stdout), cpu


def _best(a: tuple | None, b: tuple) -> tuple:
    return b if a is None or b[0] < a[0] else a


def whole_process(models, repeat: int) -> dict[str, str]:
    """`planner evaluate` start to exit on the big week, per point or baseline (the fastest
    of `repeat` runs of each)."""
    from planner.app.files import synth_spec

    spec, _ = bind_models(
        synth_spec(LAB / "workload.yaml").model_copy(update={"users": BIG_USERS}), models.names
    )
    df = synth(spec, seed=0)
    files = [f"--{k}={LAB / (k + '.yaml')}" for k in ("cluster", "models", "slo")]
    rates: dict[str, float] = {}
    cpu_rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        week = Path(d) / "week.parquet"
        df.to_parquet(week)
        plan = Path(d) / "plan.yaml"
        _planner("optimize", *files, f"--workload={LAB / 'workload.yaml'}", f"--output={plan}")
        # a first run compiles numba's loops into its on-disk cache (a fresh install does once)
        _planner("evaluate", str(plan), f"--workload={week}", "--all-points", "--baseline=melange")
        best: dict[str, tuple[float, float, int]] = {}  # name -> (wall, cpu, simulations)
        for _ in range(repeat):  # a shared machine: the best of a few runs
            wall, out, cpu = _planner(
                "evaluate",
                str(plan),
                f"--workload={week}",
                "--all-points",
                "--baseline=lru-matched",
            )
            n_sims = len(out["points"])
            best["points"] = _best(best.get("points"), (wall, cpu, n_sims))
            for name in baselines.BASELINES:
                wall, _, cpu = _planner(
                    "evaluate", f"--workload={week}", f"--baseline={name}", *files
                )
                best[name] = _best(best.get(name), (wall, cpu, 1))
        for name, (wall, cpu, n_sims) in best.items():
            rates[name] = len(df) * n_sims / wall
            cpu_rates[name] = len(df) * n_sims / cpu
            what = f"{n_sims} points and twins" if name == "points" else f"baseline {name}"
            print(
                f"planner evaluate, whole process, {len(df)} requests, {what}: {wall:.2f} s wall "
                f"= {rates[name]:,.0f} simulated requests/s ({cpu:.2f} s CPU = "
                f"{cpu_rates[name]:,.0f}/s)"
            )
    worst = min(rates.values())
    return {
        "process_requests": str(len(df)),
        **{f"process_{k}_rps": f"{v:.0f}" for k, v in rates.items()},
        **{f"process_{k}_cpu_rps": f"{v:.0f}" for k, v in cpu_rates.items()},
        "process_min_rps": f"{worst:.0f}",
        "process_ge_100k": str(worst >= 100_000).lower(),
    }


if __name__ == "__main__":
    main()
