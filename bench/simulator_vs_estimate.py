"""The estimate's closed loop vs the simulator replaying the same closed loop (issue 31, item 3).

What TTFT and TPOT at a concurrency mean (`planner estimate`, `closed_loop`): N clients send
fixed-length requests back to back (each sends its next request when its last one ends). In
the steady state the clients are spread out: a prompt arrives while the others decode, and
its chunks ride in their steps. A benchmark's clients all start together, and clients that
send alike requests keep that round's order for a while (a share CHAIN_SHARE of the
requests; of the others a share BURST_SHARE are first-round ones; both fitted to the
measured serving runs: closedloop.py). TTFT at a concurrency is the mean over the three
(`benchmark_loop`); TPOT is the steady state's.

The simulator replays those cases of that loop, each client's next arrival the end of its
previous request (found by simulating the whole trace again until every round is exact):
- steady: the clients' first requests spread evenly over one request's hold time; scored on
  every client's second request, the first round that meets all the other clients running;
- burst: every client sends its first request at time 0; its first round scored as the
  burst, its second (the clients in the first round's order) as the chained requests;
and weighs their TTFTs as the estimate does. Both use the same InstancePerf (vLLM's
defaults, the shipped calibration). Split: none (no fitting); a grid of models, GPUs and
concurrencies.

Target: median |estimate / simulator - 1| <= 5% for TTFT and for TPOT over the grid.

Known limit: the simulator is deterministic and the requests are alike, so clients whose
prompts share a step finish together and arrive together from then on; later rounds of the
spread-out replay merge into convoys (at 64 clients on A100/H100 within 4-6 rounds, jitter of
a decode step in the clients' sends does not stop it). Real engines' jitter splits them;
BURST_SHARE and CHAIN_SHARE measure how much stays in step. The steady state is therefore
scored on round 2, the chained requests on the burst replay's round 2. Where the request's
delay to the engine outlasts a decode step (Llama-3.1-8B and Qwen3-30B-A3B on L40S and A100,
2048-token budget, 16-64 clients) the replay's groups merge in that round (up to 5x the
estimate's chain, which waits out one group's step only: `_chained_ttft`) and the weighed
TTFT reads 10-31% above the estimate there.

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
from planner.optimizer.perf import (
    BURST_SHARE,
    CHAIN_SHARE,
    benchmark_loop,
    closed_loop,
    instance_perf,
)
from planner.optimizer.sim.simulator import simulate
from planner.schemas import parse

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from result import cells

TARGET = 0.05
MODELS = (
    ("Llama-3.1-8B-Instruct", "bf16"),
    ("Qwen2.5-Coder-32B-Instruct", "fp8"),
    ("Qwen3-30B-A3B", "bf16"),
)
GPUS = ("L40S", "A100-80GB-SXM", "H100-SXM", "RTX-4090")
CLIENTS = (1, 4, 16, 64)
INPUT, OUTPUT = 1024, 256  # tokens
STEADY_ROUND = 1  # the spread-out replay's scored round (0-based): see "Known limit"


def _point(model: str):
    inst = {
        "id": "m-0",
        "model": model,
        "variant": "v",
        "node": "n",
        "gpus": [0],
        "tp": 1,
        "tier": "gpu",
        "port": 8100,
        "memory_gib": {"weights": 1.0, "kv": 1.0, "overhead": 0.0},
    }
    plan = {"kind": "plan", "selected": "p", "points": [{"name": "p", "instances": [inst]}]}
    return parse(plan, "plan").points[0]


def replay(perf, model: str, start: np.ndarray, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT s, TPOT s), each (client, round), of the simulator replaying closed-loop clients
    whose first requests leave at `start` (s, one per client)."""
    point, slo = _point(model), parse({"kind": "slo", "default": {}}, "slo")
    clients = len(start)
    first = closed_loop(perf, INPUT, OUTPUT, clients)
    hold = first.ttft_s + (OUTPUT - 1) * first.tpot_s  # s, a first guess
    arrive = start[:, None] + np.arange(rounds)[None, :] * hold  # (client, round), s
    n = clients * rounds
    for _ in range(rounds):  # pass r makes round r exact
        order = np.argsort(arrive, axis=None, kind="stable")
        trace = {
            "timestamp": arrive.ravel()[order],
            "model": np.array([model] * n, dtype=object),
            "input_tokens": np.full(n, INPUT),
            "output_tokens": np.full(n, OUTPUT),
        }
        sim = simulate(point, {"m-0": perf}, trace, slo)
        ttft, e2e = np.empty(n), np.empty(n)
        ttft[order], e2e[order] = sim.ttft_s, sim.e2e_s
        ttft, e2e = ttft.reshape(clients, rounds), e2e.reshape(clients, rounds)
        # each next request leaves when the last one ends
        arrive = np.concatenate([start[:, None], (arrive + e2e)[:, :-1]], axis=1)
    return ttft, (e2e - ttft) / (OUTPUT - 1)


def simulated(perf, model: str, clients: int) -> tuple[float, float]:
    """(mean TTFT s, mean TPOT s) of the simulator: the steady and the burst replay weighed
    as `benchmark_loop` weighs them (module docstring)."""
    steady = closed_loop(perf, INPUT, OUTPUT, clients)
    hold = steady.ttft_s + (OUTPUT - 1) * steady.tpot_s  # s
    # one round more than scored: its prompts ride in the scored round's decode steps
    ttft, tpot = replay(perf, model, np.arange(clients) * hold / clients, STEADY_ROUND + 2)
    burst, _ = replay(perf, model, np.zeros(clients), 3)  # rounds as above: score round 1
    steady_ttft = float(ttft[:, STEADY_ROUND].mean())
    mixed = (1 - BURST_SHARE) * steady_ttft + BURST_SHARE * float(burst[:, 0].mean())
    mixed = (1 - CHAIN_SHARE) * mixed + CHAIN_SHARE * float(burst[:, 1].mean())
    return mixed, float(tpot[:, STEADY_ROUND].mean())


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
                est = benchmark_loop(perf, INPUT, OUTPUT, c)
                sim_ttft, sim_tpot = simulated(perf, model, c)
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
    fields = {
        "ttft_median_err": mt,
        "tpot_median_err": mp,
        "ttft_max_err": max(errs_ttft),
        "tpot_max_err": max(errs_tpot),
        "cases": len(errs_ttft),
        "seconds": f"{time.perf_counter() - t0:.0f}",
    }
    print(f"RESULT {cells(ok, fields)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
