"""Calibration recovers known perf-model factors from synthetic engine points, falls back to
microbenchmark priors, and flags profiles from another vLLM or device."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.catalog.gpus import resolve_gpu
from planner.catalog.models import ModelArch, resolve_arch
from planner.optimizer.perf import calib_from_profile, decode_step_s, instance_perf, prefill_s
from planner.optimizer.perf.calib import default_calib
from planner.optimizer.perf.calibration import calibrate, priors
from planner.optimizer.sim.steptime import decode_time_s
from planner.profiler.store import profile_warnings
from planner.schemas.profile import (
    DecodePoint,
    EngineRun,
    Environment,
    Hardware,
    IdlePoint,
    PrefillPoint,
    Profile,
    Stat,
)
from planner.tinymodel import tiny_arch


def _synthetic(gpu_name, arch_name, truth, prompts, concs, p=128, o=64):
    """A profile whose points are what the perf model predicts under `truth` (a Calib)."""
    gpu, arch = resolve_gpu(gpu_name), resolve_arch(arch_name)
    perf = instance_perf(arch, "bf16", gpu, 1, calib=truth)
    run = EngineRun(
        model="m",
        variant="bf16",
        quantization="bf16",
        arch=arch,
        cold_start_s=40.0,
        weight_load_s=8.0,
    )
    run.prefill = [
        PrefillPoint(
            prompt_tokens=n, latency_s=Stat(median=truth.prefill_overhead_s + prefill_s(perf, n))
        )
        for n in prompts
    ]
    run.decode = [
        DecodePoint(
            concurrency=c,
            prompt_tokens=p,
            output_tokens=o,
            tpot_s=Stat(median=decode_step_s(perf, c, p + o / 2.0)),
        )
        for c in concs
    ]
    return Profile(node="n", gpu_type=gpu_name, engine=[run]), gpu


def _hopper_truth(**extra):
    """Hopper defaults with known factors; attention at the default ratio to the GEMMs, as
    the fit assumes."""
    base = default_calib("hopper")
    return base, replace(
        base,
        compute_efficiency=0.55,
        bandwidth_efficiency=0.72,
        attn_efficiency=0.55 * base.attn_efficiency / base.compute_efficiency,
        step_overhead_s=0.004,
        **extra,
    )


def test_recovers_known_parameters_gpu():
    base, truth = _hopper_truth(prefill_overhead_s=0.015)
    prof, gpu = _synthetic(
        "H100-SXM",
        "Llama-3.1-8B-Instruct",
        truth,
        prompts=[256, 1024, 2048, 4096, 8192],
        concs=[1, 8, 32, 64],
    )
    cal = calibrate(prof, gpu, base)
    assert cal.compute_efficiency == pytest.approx(0.55, rel=0.05)
    assert cal.bandwidth_efficiency == pytest.approx(0.72, rel=0.05)
    assert cal.step_overhead_s == pytest.approx(0.004, rel=0.1)
    assert cal.prefill_overhead_s == pytest.approx(0.015, rel=0.15)
    assert cal.residual_rel < 0.02
    assert cal.points == 9
    assert cal.engine_init_s == pytest.approx(32.0)  # cold start minus weight loading
    # the fitted fields feed the perf model
    c = calib_from_profile(prof.model_copy(update={"calibration": cal}))
    assert c.compute_efficiency == pytest.approx(cal.compute_efficiency)
    # bf16 runs pin one compute scale; fp8/fp4 GEMMs and attention follow it, not the defaults
    scale = cal.compute_efficiency / base.compute_efficiency
    assert c.fp8_compute_efficiency == pytest.approx(base.fp8_compute_efficiency * scale)
    assert c.fp4_compute_efficiency == pytest.approx(base.fp4_compute_efficiency * scale)
    assert c.attn_efficiency == pytest.approx(base.attn_efficiency * scale)


def test_overhead_bound_cpu_points_fit_overheads():
    base = default_calib("cpu")
    truth = replace(base, step_overhead_s=0.003, prefill_overhead_s=0.02)
    prof, gpu = _synthetic(
        "cpu", "Qwen2.5-7B-Instruct", truth, prompts=[16, 64, 256], concs=[1, 2, 4], p=16, o=16
    )
    cal = calibrate(prof, gpu, base)
    assert cal.residual_rel < 0.05
    assert cal.source.startswith("engine fit")


def test_points_the_host_disturbed_are_left_out_of_the_fit():
    """Two decode points read 2x and 3x their truth (a starved HTTP process on a 2-core
    host): the refit without them recovers the truth; with them kept it could not."""
    base, truth = _hopper_truth()
    prof, gpu = _synthetic(
        "H100-SXM",
        "Llama-3.1-8B-Instruct",
        truth,
        prompts=[256, 1024, 2048, 4096, 8192],
        concs=[1, 4, 8, 16, 32, 64],
    )
    for d, x in zip(prof.engine[0].decode[1:3], (2.0, 3.0), strict=True):
        d.tpot_s = Stat(median=d.tpot_s.median * x)
    cal = calibrate(prof, gpu, base)
    assert cal.points == 9 and "2 outlier(s) left out" in cal.source
    assert cal.residual_rel < 0.02
    assert cal.bandwidth_efficiency == pytest.approx(0.72, rel=0.05)
    assert cal.step_overhead_s == pytest.approx(0.004, rel=0.1)


def test_priors_from_microbenchmarks():
    gpu = resolve_gpu("H200-SXM")
    prof = Profile(
        node="n",
        gpu_type="H200-SXM",
        hardware=Hardware(
            gemm_tflops={"bf16": Stat(median=791.2)},
            device_copy_gbps=Stat(median=4100.0),
            h2d_pinned_gbps=Stat(median=52.0),
            disk_read_gbps=Stat(median=3.1),
        ),
    )
    ce0, be0 = priors(prof, gpu, default_calib("hopper"))
    assert ce0 == pytest.approx(791.2 / 989.0)
    assert be0 == pytest.approx(4100.0 / 4800.0)
    cal = calibrate(prof, gpu, default_calib("hopper"))  # no engine points: priors only
    assert cal.compute_efficiency == pytest.approx(ce0)
    assert cal.h2d_gbps == 52.0 and cal.disk_read_gbps == 3.1
    assert cal.step_overhead_s is None and cal.source == "microbenchmarks"


def test_failed_runs_are_ignored():
    prof = Profile(
        node="n",
        gpu_type="cpu",
        engine=[EngineRun(model="m", variant="v", status="failed", reason="bad_model_path")],
    )
    cal = calibrate(prof, resolve_gpu("cpu"), default_calib("cpu"))
    assert cal.points == 0 and cal.source == "defaults"


def test_warnings_other_engine_version_or_device():
    prof = Profile(
        node="n",
        gpu_type="H200-SXM",
        environment=Environment(engine="vllm", engine_version="0.31.2", device_name="NVIDIA H200"),
        engine=[EngineRun(model="m", variant="v")],
    )
    assert profile_warnings(prof, engine_version="0.31.0", device_name="NVIDIA H200") == []
    w = profile_warnings(prof, engine_version="0.32.0", device_name="NVIDIA H100 80GB HBM3")
    assert len(w) == 2 and "0.31.2" in w[0] and "H100" in w[1]
    assert (
        "no successful engine run"
        in profile_warnings(Profile(node="n", gpu_type="cpu"), engine_version="")[0]
    )


def test_calibrate_cli_writes_profile(tmp_path):
    from planner.cli.main import main
    from planner.profiler import store
    from planner.schemas import load_profile

    base = default_calib("cpu")
    prof, _ = _synthetic(
        "cpu",
        "Qwen2.5-7B-Instruct",
        replace(base, step_overhead_s=0.003),
        [16, 64],
        [1, 2],
        p=16,
        o=16,
    )
    path = store.save(prof, tmp_path / "n-cpu.yaml")
    with pytest.raises(SystemExit) as e:
        main(["profile", "calibrate", str(path), "--json"])
    assert e.value.code == 0
    assert load_profile(path).calibration.points == 4


def _cpu_profile(ttft_ms, tpot_ms, prompts=(16, 64, 128, 256, 384), concs=(1, 2, 4, 8, 16)):
    """The tiny model on the CPU build, measured as the profiler does (decode at 128 prompt
    tokens + 32 output): TTFT(prompt tokens) and TPOT(concurrency) in ms from the callables."""
    run = EngineRun(
        model="tiny", variant="bf16", quantization="bf16", arch=ModelArch(**tiny_arch())
    )
    run.prefill = [
        PrefillPoint(prompt_tokens=n, latency_s=Stat(median=ttft_ms(n) / 1e3)) for n in prompts
    ]
    run.decode = [
        DecodePoint(
            concurrency=c, prompt_tokens=128, output_tokens=32, tpot_s=Stat(median=tpot_ms(c) / 1e3)
        )
        for c in concs
    ]
    return Profile(node="n", gpu_type="cpu", engine=[run]), resolve_gpu("cpu")


def test_cpu_decode_step_grows_with_sequences_not_their_context():
    """The CPU build's decode step grows with the batch's sequences (scheduling, sampling,
    streaming each one's token), hardly with their context (an in-process vLLM-CPU engine:
    x8 1.39 ms at 128 context tokens, 1.45 ms at 320). Fitted to points measured at 144
    tokens of context, a step at 400 keeps the measured time: a slope charged per context
    token (KV reads, attention pairs) would make it grow with the context (x1 2.21 ms)."""
    prof, gpu = _cpu_profile(lambda n: 9.0 + 0.012 * n, lambda c: 1.6 + 0.11 * c)
    cal = calibrate(prof, gpu, default_calib("cpu"))
    assert cal.seq_overhead_s == pytest.approx(0.11e-3, rel=0.15)
    assert cal.residual_rel < 0.02
    fitted = calib_from_profile(prof.model_copy(update={"calibration": cal}))
    perf = instance_perf(ModelArch(**tiny_arch()), "bf16", gpu, 1, calib=fitted)
    for c in (1, 4, 8):
        want_s = (1.6 + 0.11 * c) / 1e3
        assert decode_step_s(perf, c, 400.0) == pytest.approx(want_s, rel=0.04)
        # the simulator's decode runs (closed form): 8 steps from 400 tokens of context each
        assert decode_time_s(perf.step, c, c * 400.0, 8) / 8 == pytest.approx(want_s, rel=0.04)


def test_gpu_fit_has_no_per_sequence_cost():
    base, truth = _hopper_truth(prefill_overhead_s=0.015)
    prof, gpu = _synthetic(
        "H100-SXM", "Llama-3.1-8B-Instruct", truth, prompts=[256, 2048, 8192], concs=[1, 8, 64]
    )
    assert calibrate(prof, gpu, base).seq_overhead_s is None


def test_fit_points_name_what_was_measured_in_their_order():
    """Each fit point says what it measured (bench/simulator_vs_vllm_cpu prints them beside the
    fit), the one-client decode point's TTFT included, in the points' own order."""
    from planner.optimizer.perf.fitpoints import fit_points

    prof, gpu = _cpu_profile(lambda n: 9.0, lambda c: 1.7, prompts=(16, 64), concs=(1, 8))
    prof.engine[0].decode[0].ttft_s = Stat(median=0.005)
    labels = [p.label for p in fit_points(prof, gpu, default_calib("cpu"))]
    assert labels == [
        "prefill 16 tok",
        "prefill 64 tok",
        "decode x1 TPOT",
        "decode x1 TTFT",
        "decode x8 TPOT",
    ]


def _idle_and_busy_profile(busy_ttft_ms):
    """The CPU build's tiny model: idle prefills 9 ms + 12 us/token (each prompt sent after a
    quiet pause), and the one-client decode point's TTFT `busy_ttft_ms` (each stream sent as
    the last one ended); None: no TTFT measured there."""
    prof, gpu = _cpu_profile(lambda n: 9.0 + 0.012 * n, lambda c: 1.6 + 0.11 * c)
    if busy_ttft_ms is not None:
        prof.engine[0].decode[0].ttft_s = Stat(median=busy_ttft_ms / 1e3)
    return prof, gpu


def test_cpu_busy_points_faster_than_idle_ones_get_their_own_overhead():
    """A 128-token first token 4 ms faster when the engine was at work than after a pause
    (vLLM-CPU: 4.96-6.03 ms against 9.3 ms on a quiet host): two request overheads, 4 ms
    apart, both sides fitted; the simulator's engine wakes for the difference."""
    idle_128 = 9.0 + 0.012 * 128
    prof, gpu = _idle_and_busy_profile(idle_128 - 4.0)
    cal = calibrate(prof, gpu, default_calib("cpu"))
    assert cal.busy_prefill_overhead_s is not None
    assert cal.prefill_overhead_s - cal.busy_prefill_overhead_s == pytest.approx(0.004, rel=0.1)
    assert cal.residual_rel < 0.02
    perf = instance_perf(
        ModelArch(**tiny_arch()),
        "bf16",
        gpu,
        1,
        calib=calib_from_profile(prof.model_copy(update={"calibration": cal})),
    )
    assert perf.idle_wake_s == pytest.approx(0.004, rel=0.1)
    assert perf.busy_delay_s == pytest.approx(cal.busy_prefill_overhead_s)


def test_the_idle_wake_scales_with_the_idle_time_the_profile_measured():
    """Idle points of a 128-token prompt (vLLM-CPU on a 2-core VM, 2026-12-03: 6.5 ms 5 ms
    after a stream, 10.0 ms after 0.3 s, 11.2 ms after 1.5 s): the wake-up the prefill
    points carry (their 0.3 s of quiet) is share 1, a shorter quiet's less, a longer one's
    more; the simulator's engine gets those knots. A wake-up under 5% of the TTFT is noise:
    no curve."""
    idle_128 = 9.0 + 0.012 * 128
    prof, gpu = _idle_and_busy_profile(idle_128 - 4.0)
    run = prof.engine[0]
    run.prefill_idle_s = 0.3

    def points(ms):
        gaps = (0.005, 0.05, 0.3, 1.5)
        return [
            IdlePoint(idle_s=g, prompt_tokens=128, latency_s=Stat(median=t / 1e3))
            for g, t in zip(gaps, ms, strict=True)
        ]

    run.idle = points((6.5, 8.0, 10.0, 11.2))
    cal = calibrate(prof, gpu, default_calib("cpu"))
    assert cal.idle_wake_curve == [(0.005, 0.0), (0.05, 0.429), (0.3, 1.0), (1.5, 1.343)]
    perf = instance_perf(
        ModelArch(**tiny_arch()),
        "bf16",
        gpu,
        1,
        calib=calib_from_profile(prof.model_copy(update={"calibration": cal})),
    )
    knots = perf.wake_knots()
    assert knots[:4] == (0.005, 0.05, 0.3, 1.5)
    assert knots[4:] == pytest.approx(
        [0.0, 0.429 * perf.idle_wake_s, perf.idle_wake_s, 1.343 * perf.idle_wake_s]
    )

    run.idle = points((10.0, 10.1, 10.2, 10.3))
    assert calibrate(prof, gpu, default_calib("cpu")).idle_wake_curve is None


def test_a_bimodal_wake_takes_the_trimmed_mean_of_its_samples():
    """After 50 ms of quiet the CPU build wakes either fast or slow (5.25 ms in one quiet-host
    profile's median of 5, 8.08 ms in the next): the curve takes the samples' mean, where the
    median would pick one mode, less the highest and the lowest, where one stalled sample
    would move a plain mean (and with it every share, through the 0.3 s reference)."""
    from planner.profiler.stats import summarize

    prof, gpu = _idle_and_busy_profile(9.0 + 0.012 * 128 - 4.0)
    run = prof.engine[0]
    run.prefill_idle_s = 0.3
    samples = {0.005: [6.5] * 9, 0.05: [6.5] * 5 + [10.0] * 4, 0.3: [10.0] * 8 + [40.0]}
    run.idle = [
        IdlePoint(idle_s=g, prompt_tokens=128, latency_s=summarize([t / 1e3 for t in v]))
        for g, v in samples.items()
    ]
    assert run.idle[1].latency_s.median == pytest.approx(0.0065)  # the fast mode
    curve = calibrate(prof, gpu, default_calib("cpu")).idle_wake_curve
    assert curve == [(0.005, 0.0), (0.05, 0.429), (0.3, 1.0)]  # 3 of 7 slow, no stall


def test_one_request_overhead_without_busy_points_and_off_the_cpu_build():
    """No busy point: today's single overhead (and nothing for the engine to wake). Only busy
    points: they are the prefills. A GPU profile's one-client TTFT stays a prefill point."""
    base = default_calib("cpu")
    prof, gpu = _idle_and_busy_profile(None)
    cal = calibrate(prof, gpu, base)
    assert cal.busy_prefill_overhead_s is None
    assert cal.prefill_overhead_s > 0 and cal.residual_rel < 0.02
    perf = instance_perf(
        ModelArch(**tiny_arch()),
        "bf16",
        gpu,
        1,
        calib=calib_from_profile(prof.model_copy(update={"calibration": cal})),
    )
    assert perf.idle_wake_s == 0.0 and perf.busy_delay_s == perf.prefill_overhead_s

    only_busy, _ = _idle_and_busy_profile(6.0)
    only_busy.engine[0].prefill = []
    cal = calibrate(only_busy, gpu, base)
    assert cal.busy_prefill_overhead_s is None and cal.prefill_overhead_s > 0

    hb, truth = _hopper_truth(prefill_overhead_s=0.015)
    prof, gpu = _synthetic(
        "H100-SXM", "Llama-3.1-8B-Instruct", truth, prompts=[256, 2048, 8192], concs=[1, 8, 64]
    )
    prof.engine[0].decode[0].ttft_s = Stat(median=0.005)
    assert calibrate(prof, gpu, hb).busy_prefill_overhead_s is None
