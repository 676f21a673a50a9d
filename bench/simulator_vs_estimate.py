"""The estimate's closed loop vs the simulator replaying the same closed loop (issue 31, item 3).

What TTFT and TPOT at a concurrency mean (`planner estimate`, `closed_loop`): N clients send
fixed-length requests back to back (each sends its next request when its last one ends), all
starting together, as a serving benchmark runs them: the mean over ROUNDS requests per
client (`closed_loop(..., rounds=ROUNDS)`; the estimate uses 1 / BURST_SHARE rounds, 6). The
simulator replays that loop: each client's next arrival is the end of its previous request,
found by simulating the whole trace again until every round is exact (round r depends only
on rounds before it: ROUNDS passes). Both use the same InstancePerf (vLLM's defaults, the
shipped calibration). Split: none (no fitting); a grid of models, GPUs and concurrencies.

Target: median |estimate / simulator - 1| <= 5% for TTFT and for TPOT over the grid.

Known gap (issue 31, item 3, open): the simulator is deterministic and the requests are
alike, so clients that start together stay in step: every round arrives as a burst, as the
first does. The estimate takes only the first round as a burst and the later ones spread out
(one burst in 1 / BURST_SHARE rounds, the share fitted to the measured serving runs). TPOT
agrees; TTFT of the simulator is the first round's, 1.5-3x the estimate's at 4-64 clients.

    python bench/simulator_vs_estimate.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from planner.catalog.gpus import resolve_gpu
from planner.catalog.models import resolve_arch_name
from planner.optimizer.perf import closed_loop, instance_perf
from planner.optimizer.sim.simulator import simulate
from planner.schemas import parse

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from result import finish

TARGET = 0.05
MODELS = (("Llama-3.1-8B-Instruct", "bf16"), ("Qwen2.5-Coder-32B-Instruct", "fp8"),
          ("Qwen3-30B-A3B", "bf16"))  # fmt: skip
GPUS = ("L40S", "A100-80GB-SXM", "H100-SXM", "RTX-4090")
CLIENTS = (1, 4, 16, 64)
INPUT, OUTPUT = 1024, 256  # tokens
ROUNDS = 6  # requests per client: 1 / BURST_SHARE, as `planner estimate` weighs them


def _point(model: str):
    inst = {
        "id": "m-0", "model": model, "variant": "v", "node": "n", "gpus": [0], "tp": 1,
        "tier": "gpu", "port": 8100, "memory_gib": {"weights": 1.0, "kv": 1.0, "overhead": 0.0},
    }  # fmt: skip
    plan = {"kind": "plan", "selected": "p", "points": [{"name": "p", "instances": [inst]}]}
    return parse(plan, "plan").points[0]


def replay(perf, model: str, clients: int) -> tuple[float, float]:
    """(mean TTFT s, mean TPOT s) of the simulator replaying `clients` closed-loop clients."""
    point, slo = _point(model), parse({"kind": "slo", "default": {}}, "slo")
    first = closed_loop(perf, INPUT, OUTPUT, clients)
    hold = first.ttft_s + (OUTPUT - 1) * first.tpot_s  # s, a first guess
    start = np.zeros(clients)  # every client sends its first request at once
    arrive = start[:, None] + np.arange(ROUNDS)[None, :] * hold  # (client, round), s
    for _ in range(ROUNDS):  # pass r makes round r exact
        order = np.argsort(arrive, axis=None, kind="stable")
        n = clients * ROUNDS
        trace = {
            "timestamp": arrive.ravel()[order],
            "model": np.array([model] * n, dtype=object),
            "input_tokens": np.full(n, INPUT),
            "output_tokens": np.full(n, OUTPUT),
        }
        sim = simulate(point, {"m-0": perf}, trace, slo)
        ttft, e2e = np.empty(n), np.empty(n)
        ttft[order], e2e[order] = sim.ttft_s, sim.e2e_s
        ttft, e2e = ttft.reshape(clients, ROUNDS), e2e.reshape(clients, ROUNDS)
        tpot = (e2e - ttft) / (OUTPUT - 1)
        # each next request leaves when the last one ends
        arrive = np.concatenate(
            [start[:, None], (arrive + e2e)[:, :-1]], axis=1
        )  # fmt: skip
    return float(ttft.mean()), float(tpot.mean())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one model, two GPUs")
    args = ap.parse_args()
    models, gpus = (MODELS[:1], GPUS[:2]) if args.quick else (MODELS, GPUS)
    errs_ttft, errs_tpot = [], []
    t0 = time.perf_counter()
    print(f"{'model':28} {'gpu':14} {'N':>3}  TTFT est/sim ms      TPOT est/sim ms")
    for model, q in models:
        arch = resolve_arch_name(model)
        for g in gpus:
            perf = instance_perf(arch, q, resolve_gpu(g), 1)
            if not perf.fits:
                print(f"{model:28} {g:14}  does not fit on one GPU: skipped")
                continue
            for c in CLIENTS:
                est = closed_loop(perf, INPUT, OUTPUT, c, rounds=ROUNDS)
                sim_ttft, sim_tpot = replay(perf, model, c)
                et, ep = est.ttft_s / sim_ttft - 1, est.tpot_s / sim_tpot - 1
                errs_ttft.append(abs(et))
                errs_tpot.append(abs(ep))
                print(
                    f"{model:28} {g:14} {c:3d}  {est.ttft_s * 1e3:7.1f} {sim_ttft * 1e3:7.1f} "
                    f"{et:+6.1%}  {est.tpot_s * 1e3:6.2f} {sim_tpot * 1e3:6.2f} {ep:+6.1%}",
                    flush=True,
                )
    mt, mp = float(np.median(errs_ttft)), float(np.median(errs_tpot))
    ok = mt <= TARGET and mp <= TARGET
    return finish(ok, {
        "ttft_median_err": mt, "tpot_median_err": mp,
        "ttft_max_err": max(errs_ttft), "tpot_max_err": max(errs_tpot),
        "cases": len(errs_ttft), "seconds": f"{time.perf_counter() - t0:.0f}",
    })  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
