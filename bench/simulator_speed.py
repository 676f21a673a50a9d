"""Simulator speed: a 10-user, 7-day synthetic trace on plans/examples/lab16, each baseline.

Prints simulated requests per second of wall time (one core: BLAS threads pinned to 1) and
the wall time of the week (and its CPU time: the machine may be shared), best of `--repeat`
runs with the per-instance memo cleared (cold), and one rerun with it (warm: what an
optimize run sees for instances shared between points). Trace conversion to arrays happens
once, as in an optimize run. Ends with RESULT.

    python bench/simulator_speed.py [--users 10] [--days 7] [--seed 0] [--repeat 9]
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from planner.cli.inputs import silence_solver_banner  # noqa: E402
from planner.optimizer import baselines  # noqa: E402
from planner.optimizer.sim import simulator  # noqa: E402
from planner.optimizer.sim.request import to_requests  # noqa: E402
from planner.optimizer.sim.simulator import simulate  # noqa: E402
from planner.optimizer.workload.synth import bind_models, default_spec, synth  # noqa: E402
from planner.schemas import load_cluster, load_models, load_slo  # noqa: E402

LAB = Path(__file__).resolve().parents[1] / "plans" / "examples" / "lab16"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=9)  # a shared VM: the best of many
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
            simulator._ALONE_CACHE.clear()  # cold: nothing remembered from earlier points
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
    print("RESULT " + " ".join(f"{k}={v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
