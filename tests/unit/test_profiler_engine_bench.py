"""Engine-bench logic without a server: run planning, resume, path pre-check, log/metrics
parsing, TPOT from stream times, the server's argv, and the measurement loops and the CUDA
sleep/wake sequence against a fake client (sleep mode needs a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.engines.vllm import ENGINE as VLLM
from planner.profiler import engine_bench as eb
from planner.profiler import engine_client as ec
from planner.profiler import engine_measure as em
from planner.profiler import engine_runs as er
from planner.schemas import parse
from planner.schemas.profile import DecodePoint, EngineRun, PrefillPoint, Profile, Stat
from planner.tinymodel import tiny_arch

TINY = tiny_arch()  # the tiny test model's architecture, as models.yaml declares it


def _models():
    return parse(
        {
            "kind": "models",
            "models": [
                {
                    "name": "tiny",
                    "architecture": TINY,
                    "max_context": 2048,
                    "variants": [
                        {"name": "bf16", "quantization": "bf16", "path": "/x/tiny"},
                        {"name": "awq", "quantization": "awq", "path": "org/tiny-awq"},
                    ],
                },
                {
                    "name": "big",
                    "architecture": "Llama-3.1-70B-Instruct",
                    "variants": [
                        {
                            "name": "bf16",
                            "quantization": "bf16",
                            "path": "meta-llama/Llama-3.1-70B-Instruct",
                        }
                    ],
                },
            ],
        },
        "models",
    )


def test_plan_runs_smallest_tp_that_fits():
    runs, skipped = er.plan_runs(_models(), devices=4, memory_gib=80.0)
    keys = [r.key for r in runs]
    assert ("tiny", "bf16", 1) in keys and ("tiny", "awq", 1) in keys
    assert (
        "big",
        "bf16",
        4,
    ) in keys  # 70B bf16 ~131 GiB: TP 2 leaves 66 GiB a GPU, over 75% of 80 GiB (no room for KV)
    assert any(k == ("big", "bf16", 1) and "exceed" in why for k, why in skipped)


def test_plan_runs_filters_and_explicit_tp():
    runs, skipped = er.plan_runs(
        _models(), devices=2, memory_gib=24.0, model="tiny", variant="bf16", tps=[1, 2, 4]
    )
    assert [r.key for r in runs] == [("tiny", "bf16", 1), ("tiny", "bf16", 2)]
    assert skipped[0][0] == ("tiny", "bf16", 4) and "devices" in skipped[0][1]
    with pytest.raises(KeyError):
        er.plan_runs(_models(), devices=1, memory_gib=24.0, model="nope")


def test_tp_divides():
    assert er.tp_divides(32, 8, 4)
    assert er.tp_divides(32, 8, 16)  # KV heads replicate past 8
    assert not er.tp_divides(12, 4, 8)


def test_is_done_resume_rules():
    p = Profile(node="n", gpu_type="cpu")
    key = ("tiny", "bf16", 1)
    assert not er.is_done(p, key)
    p.engine = [EngineRun(model="tiny", variant="bf16", status="failed", reason="timeout")]
    assert er.is_done(p, key) and not er.is_done(p, key, retry_failed=True)
    s = Stat(median=0.1)
    p.engine = [
        EngineRun(
            model="tiny", variant="bf16", prefill=[PrefillPoint(prompt_tokens=4, latency_s=s)]
        )
    ]
    assert not er.is_done(p, key)  # no decode points yet: measure again
    p.engine[0].decode = [DecodePoint(concurrency=1, tpot_s=s)]
    assert er.is_done(p, key)


def test_precheck_path(tmp_path):
    assert er.precheck_path("") == "the variant has no path"
    assert "not a directory" in er.precheck_path(str(tmp_path / "nope"))
    assert "no config.json" in er.precheck_path(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert er.precheck_path(str(tmp_path)) is None
    assert er.precheck_path("Qwen/Qwen2.5-7B-Instruct") is None  # a hub id: vLLM decides
    assert er.looks_local("models/tiny/bf16")


def test_vocab_size_of(tmp_path):
    (tmp_path / "config.json").write_text('{"vocab_size": 321}')
    assert ec.vocab_size_of(str(tmp_path), 9) == 321
    assert ec.vocab_size_of(str(tmp_path / "x"), 9) == 9


@given(st.integers(1, 300), st.integers(2, 200000))
def test_prompt_ids_in_vocab(n, vocab):
    ids = ec.prompt_ids(n, vocab, np.random.default_rng(0))
    assert len(ids) == n
    assert all(0 < i < vocab for i in ids)


def test_parse_kv_capacity():
    log = (
        "(EngineCore pid=1) INFO 11-29 10:51:06 [kv_cache_utils.py:1] CPU KV cache size: 1,048,576 tokens\n"
        "INFO [kv_cache_utils.py:2] Maximum concurrency for 2,048 tokens per request: 512.00x\n"
        "(EngineCore_DP0 pid=7) INFO GPU KV cache size: 2,000,000 tokens, Maximum concurrency ...\n"
    )
    assert VLLM.kv_capacity_tokens(log) == 2_000_000
    assert VLLM.kv_capacity_tokens("nothing here") is None


def test_parse_metrics_kv():
    text = (
        "# HELP vllm:cache_config_info Information\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="4096"} 1.0\n'
    )
    assert VLLM.kv_capacity_tokens("", text) == 65536
    assert VLLM.kv_capacity_tokens("", 'vllm:cache_config_info{engine="0"} 1.0') is None
    assert VLLM.kv_capacity_tokens("", "") is None


def test_tpot_of():
    assert ec.tpot_of([(1.0, 1), (1.1, 2), (1.2, 3), (1.3, 4)]) == pytest.approx(0.1)
    assert ec.tpot_of([(1.0, 1), (1.3, 7)]) == pytest.approx(0.05)  # coalesced chunks: 6 tokens
    assert ec.tpot_of([(1.0, -1), (1.1, -1), (1.2, -1)]) == pytest.approx(
        0.1
    )  # no counts: 1 a chunk
    assert ec.tpot_of([(1.0, 1)]) is None
    assert ec.tpot_of([(1.0, 3), (2.0, 3)]) is None


def test_chunk_tokens():
    tok = 'data: {"choices": [{"text": "ab"}], "usage": {"completion_tokens": 5}}'
    assert ec.chunk_tokens(tok) == 5
    assert ec.chunk_tokens('data: {"choices": [{"text": "a"}]}') == -1
    assert ec.chunk_tokens('data: {"choices": [], "usage": {"completion_tokens": 9}}') is None
    assert ec.chunk_tokens("data: [DONE]") is None
    assert ec.chunk_tokens("") is None
    assert ec.chunk_tokens("data: {not json") is None


def test_instance_and_argv_cpu_and_cuda():
    m = _models().models[0]
    spec = er.RunSpec(m, m.variants[0], 1)
    cpu = er.BenchConfig.for_device("cpu", quick=True, kv_gib=2.0)
    argv, env = VLLM.build_argv(
        er.instance_for(spec, cpu, 8123), model_path="/x/tiny", served_name="tiny", device="cpu"
    )
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert "--enable-sleep-mode" not in argv and "8123" in argv and "2048" in argv
    cuda = er.BenchConfig.for_device("cuda")
    spec2 = er.RunSpec(m, m.variants[0], 2)
    argv, env = VLLM.build_argv(
        er.instance_for(spec2, cuda, 8124), model_path="/x/tiny", served_name="tiny", device="cuda"
    )
    assert "--enable-sleep-mode" in argv  # sleep/wake is measured on CUDA
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    awq = er.instance_for(er.RunSpec(m, m.variants[1], 1), cuda, 8125)
    assert awq.engine.quantization == "awq"


class FakeClient:
    """Answers like a server whose prefill takes 1 ms/token and whose stream emits every 10 ms."""

    def __init__(self, statuses=None):
        self.posts = []
        self.statuses = statuses or {}

    def complete_s(self, ids, max_tokens=1):
        return 0.001 * len(ids)

    def streams(self, prompts, out):
        return [(0.0, [(0.001 * len(p) + 0.01 * i, i + 1) for i in range(out)]) for p in prompts]

    def post_s(self, path, body=None, *, purpose="wake"):
        self.posts.append((path, body))
        return 0.5, self.statuses.get(path, 200)


def test_idle_points_take_turns_and_time_the_first_token():
    """Every idle point gets its requests, the gaps taking turns after a short stream
    (a fake client: the host's idle wake-up cannot be ordered up; its TTFT is 1 us/token)."""
    cfg = er.BenchConfig.for_device("cpu", idle_gaps_s=(0.0, 0.001), idle_reps=3)
    client, ticks = FakeClient(), []
    pts = em.measure_idle(client, cfg, 512, np.random.default_rng(0), ticks.append)
    assert [(p.idle_s, p.prompt_tokens, p.latency_s.n) for p in pts] == [
        (0.0, cfg.idle_prompt_tokens, 3),
        (0.001, cfg.idle_prompt_tokens, 3),
    ]
    assert pts[0].latency_s.median == pytest.approx(0.001 * cfg.idle_prompt_tokens)
    assert len(ticks) == cfg.idle_reps
    assert er.BenchConfig.for_device("cpu", quick=True).idle_gaps_s == ()


def test_measure_loops_with_fake_client():
    cfg = er.BenchConfig.for_device("cpu", quick=True, prefill_idle_s=0.0)
    ticks = []
    rng = np.random.default_rng(0)
    pre = em.measure_prefill(FakeClient(), cfg, 512, rng, ticks.append)
    assert [p.prompt_tokens for p in pre] == list(cfg.prompt_lens)
    assert pre[-1].latency_s.median == pytest.approx(0.001 * cfg.prompt_lens[-1])
    dec = em.measure_decode(FakeClient(), cfg, 512, rng, ticks.append)
    assert [d.concurrency for d in dec] == list(cfg.concurrencies)
    assert dec[0].tpot_s.median == pytest.approx(0.01)
    assert dec[0].ttft_s.median == pytest.approx(0.001 * cfg.decode_prompt_tokens)
    assert dec[-1].tpot_s.n >= cfg.decode_min_samples
    assert dec[0].tpot_s.n >= cfg.decode_min_samples  # concurrency 1 runs more rounds
    assert len(ticks) == len(cfg.prompt_lens) + len(cfg.concurrencies)


def test_measure_sleep_sequence_with_fake_client():
    """The CUDA sleep/wake sequence (sleep mode needs a GPU; fake client here)."""
    c = FakeClient()
    run = EngineRun(model="m", variant="v")
    em.measure_sleep(c, run, VLLM)
    assert [p for p, _ in c.posts] == [
        "/sleep?level=1",
        "/wake_up",
        "/sleep?level=2",
        "/wake_up",
        "/collective_rpc",
    ]
    assert c.posts[-1][1] == {"method": "reload_weights"}
    assert run.sleep_l1_s == 0.5 and run.wake_l1_s == 0.5 and run.wake_l2_s == 1.0
    c2 = FakeClient({"/sleep?level=1": 404})
    run2 = EngineRun(model="m", variant="v")
    em.measure_sleep(c2, run2, VLLM)
    assert run2.sleep_l1_s is None and "VLLM_SERVER_DEV_MODE" in run2.notes[0]


def test_profile_run_bad_path_needs_no_server(tmp_path):
    m = _models().models[0]
    res = eb.profile_run(
        er.RunSpec(m, m.variants[0], 1), er.BenchConfig.for_device("cpu"), log_dir=tmp_path
    )
    assert res.run.status == "failed" and res.run.reason == "bad_model_path"
    assert res.run.arch is not None and res.run.quantization == "bf16"


def test_relative_paths_resolve_against_models_file(tmp_path):
    from planner.schemas import load

    f = tmp_path / "models.yaml"
    f.write_text(
        "kind: models\nmodels:\n- name: t\n  architecture: {name: x, num_layers: 2, hidden_size: 128, "
        "num_attention_heads: 4, num_kv_heads: 2, head_dim: 32, intermediate_size: 256, vocab_size: 512, "
        "total_params_b: 0.001, active_params_b: 0.001}\n"
        "  variants:\n  - {name: a, quantization: bf16, path: models/t}\n"
        "  - {name: b, quantization: bf16, path: org/hub-id}\n"
    )
    (tmp_path / "models" / "t").mkdir(parents=True)
    runs, _ = er.plan_runs(load(f, "models"), devices=1, memory_gib=8.0)
    assert [r.path for r in runs] == [str(tmp_path / "models" / "t"), "org/hub-id"]


def test_stream_completion_decodes_chunked_sse():
    """The bare streaming client against a local fake server (chunked SSE, a line split in two)."""
    import asyncio
    import json as _json

    events = [
        'data: {"choices": [{"text": "a"}], "usage": {"completion_tokens": 1}}\n\n',
        'data: {"choices": [{"text": "bc"}], "usage": {"completion_tokens": 3}}\n\n',
        'data: {"choices": [], "usage": {"completion_tokens": 3}}\n\ndata: [DONE]\n\n',
    ]
    seen = {}

    async def handle(reader, writer):
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += await reader.read(1)
        length = int(
            next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(
                b":"
            )[1]
        )
        seen["body"] = _json.loads(await reader.readexactly(length))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        raw = "".join(events).encode()
        for piece in (raw[:30], raw[30:90], raw[90:]):  # chunk borders inside lines
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def go():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            route = VLLM.completion_route
            return await ec.stream_completion(
                "127.0.0.1", port, route, VLLM.completion_body("m", [5, 6], 3, stream=True), 10.0
            )

    t0, chunks = asyncio.run(go())
    assert [n for _, n in chunks] == [1, 3]
    assert all(t >= t0 for t, _ in chunks)
    assert seen["body"]["stream_options"]["continuous_usage_stats"] is True
    assert seen["body"]["max_tokens"] == 3 and seen["body"]["ignore_eos"] is True


def test_burst_streams_are_detected_and_left_out():
    smooth = [(0.01 * i, i + 1) for i in range(16)]
    assert not em.burst(smooth, 16)
    assert em.burst([(0.0, 1), (0.01, 16)], 16)  # one chunk carries 15 tokens
    assert em.burst(
        [(0.05 + 1e-5 * i, i + 1) for i in range(16)], 16
    )  # one token a chunk, all read at once
    assert em.burst([(1e-5 * i, -1) for i in range(16)], 16)  # no counts: a chunk is a token
    assert not em.burst([(0.0, 1), (0.01, 2)], 2)

    class Gulping(FakeClient):
        def streams(self, prompts, out):
            return [(0.0, [(0.05, 1), (0.0501, out)]), *super().streams(prompts[1:], out)]

    cfg = er.BenchConfig.for_device("cpu", quick=True)
    notes = []
    dec = em.measure_decode(Gulping(), cfg, 512, np.random.default_rng(0), lambda _s: None, notes)
    # without a prefill latency gulped streams are left out: concurrency 1 has none left
    assert [d.concurrency for d in dec] == [4]
    assert dec[0].tpot_s.median == pytest.approx(0.01)  # the gulped stream is not a 0.0001 s TPOT
    assert dec[0].tpot_s.n == 2 * 3
    assert notes and "burst" in notes[0]
    zero = [PrefillPoint(prompt_tokens=16, latency_s=Stat(median=0.0))]
    dec = em.measure_decode(
        Gulping(), cfg, 512, np.random.default_rng(0), lambda _s: None, [], zero
    )
    assert [d.tpot_s.n for d in dec] == [8, 8]  # estimated from end-to-end time


def test_gulped_tpot_and_prefill_at():
    # 16 tokens all read at 0.2 s after sending; prefill took 0.05 s: 15 later tokens in 0.15 s
    chunks = [(0.2 + 1e-6 * i, i + 1) for i in range(16)]
    assert em.gulped_tpot(0.0, chunks, 16, 0.05) == pytest.approx(0.01, rel=1e-3)
    assert em.gulped_tpot(0.0, chunks, 1, 0.05) is None
    pts = [PrefillPoint(prompt_tokens=n, latency_s=Stat(median=n / 1000)) for n in (16, 128, 512)]
    assert em.prefill_at(pts, 100) == 0.128
    assert em.prefill_at([], 100) is None


def test_decode_is_measured_again_at_the_long_prompt():
    cfg = er.BenchConfig.for_device("cpu", prefill_idle_s=0.0, concurrencies=(1, 4))
    assert cfg.decode_long_prompt_tokens == 512  # the CPU build's default
    ticks = []
    dec = em.measure_decode(FakeClient(), cfg, 512, np.random.default_rng(0), ticks.append)
    assert [(d.concurrency, d.prompt_tokens) for d in dec] == [(1, 16), (4, 16), (1, 512), (4, 512)]
    assert len(ticks) == er.steps_of(cfg) - 1 - len(cfg.prompt_lens) - cfg.idle_reps
    assert er.fit_to_context(cfg, 300).decode_long_prompt_tokens == 300 - cfg.decode_output_tokens


def test_fit_to_context_drops_prompts_that_do_not_fit():
    cfg = er.BenchConfig.for_device("cpu", quick=True)  # prompts 16, 128, 512; decode 16 + 16
    small = er.fit_to_context(cfg, 512)
    assert small.prompt_lens == (16, 128)
    assert er.fit_to_context(cfg, 24).decode_prompt_tokens == 8
    assert er.fit_to_context(cfg, 4096) == cfg


def test_parse_weight_load_zero_is_a_value():
    log = "(Worker pid=1) INFO 11-29 11:52:21 [default_loader.py:501] Loading weights took 0.00 seconds\n"
    assert VLLM.parse_startup_log(log)["weight_load_s"] == 0.0
    assert VLLM.parse_startup_log("nothing")["weight_load_s"] is None
