"""Physical invariants of the perf model (issue 31, item 2), over catalog models and GPUs.

Each names the plausible wrong model it catches (checked by breaking that formula on purpose):
- fp8 on Hopper/Ada/Blackwell: a model that runs fp8 GEMMs at the bf16 peak and fp8 efficiency
  (or takes vLLM 0.14's slow fp8 tables as they are) makes compute-bound fp8 steps no faster;
- fp8 on Ampere: one that multiplies at an fp8 peak Ampere does not have;
- TPOT monotone: a closed loop whose decode batch forgets the clients queued for a slot;
- TTFT at 1 client: a TTFT that leaves out the prompt's own chunk steps;
- MoE reads: decode that reads every expert each step, or only top-k whatever the batch;
- cpu_offload_gb: weights in host RAM read at HBM speed instead of over PCIe.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog.gpus import GPUS, resolve_gpu
from planner.catalog.models import MODELS, resolve_arch_name
from planner.optimizer.perf import closed_loop, instance_perf, prefill_s
from planner.units import GB, GIB

DENSE = sorted(n for n, a in MODELS.items() if not a.is_moe and a.total_params_b < 40)
FP8_GPUS = sorted(n for n, g in GPUS.items() if g.fp8_tflops and n != "cpu")
AMPERE = sorted(n for n, g in GPUS.items() if g.arch == "ampere")
ANY_GPU = sorted(n for n, g in GPUS.items() if g.arch != "cpu")
CHUNK = 8192  # a compute-bound step: a full prefill chunk, tokens


def _perf(model: str, q: str, gpu: str, tp: int = 1, **kw):
    return instance_perf(resolve_arch_name(model), q, resolve_gpu(gpu), tp, kv_gib=20.0, **kw)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(DENSE), st.sampled_from(FP8_GPUS))
def test_fp8_shortens_compute_bound_steps_where_the_gpu_multiplies_in_fp8(model, gpu):
    bf16, fp8 = _perf(model, "bf16", gpu), _perf(model, "fp8", gpu)
    assert fp8.step.compute_s_per_token < bf16.step.compute_s_per_token
    big = (CHUNK, CHUNK, CHUNK * CHUNK / 2)  # one prompt chunk: tokens, KV, causal pairs
    assert fp8.step.time_s(*big) < bf16.step.time_s(*big)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(DENSE), st.sampled_from(AMPERE))
def test_ampere_gains_only_memory_from_fp8(model, gpu):
    bf16, fp8 = _perf(model, "bf16", gpu), _perf(model, "fp8", gpu)
    assert fp8.step.compute_s_per_token == bf16.step.compute_s_per_token
    assert fp8.step.dense_weight_read_s < 0.62 * bf16.step.dense_weight_read_s


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([*DENSE, "Qwen3-30B-A3B", "gpt-oss-20b"]),
    st.sampled_from(["H100-SXM", "L40S", "A100-80GB-SXM", "RTX-4090", "B200-SXM"]),
    st.integers(1, 300),
    st.integers(16, 4000),
    st.integers(2, 1000),
)
def test_tpot_does_not_fall_with_concurrency_or_context(model, gpu, c, inp, out):
    perf = _perf(model, "fp8", gpu)
    base = closed_loop(perf, inp, out, c)
    # within 1%: the closed form's mean-value iteration wobbles by about 0.1%
    assert closed_loop(perf, inp, out, c + 1 + c // 2).tpot_s >= base.tpot_s * (1 - 1e-2)
    longer = closed_loop(perf, 2 * inp, out, c)
    if longer.running == base.running:  # a full KV cache runs fewer sequences: faster steps
        assert longer.tpot_s >= base.tpot_s * (1 - 1e-2)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(MODELS)), st.sampled_from(ANY_GPU), st.integers(1, 20000))
def test_ttft_of_one_client_covers_its_prefill(model, gpu, inp):
    perf = _perf(model, "fp8", gpu, tp=8)
    if perf.max_kv_tokens < inp + 64:
        return
    assert closed_loop(perf, inp, 64, 1).ttft_s >= prefill_s(perf, inp)


@given(st.sampled_from(["Qwen3-30B-A3B", "gpt-oss-120b", "MiniMax-M2.5"]), st.integers(1, 4096))
def test_moe_decode_reads_the_experts_a_batch_touches(model, batch):
    a, sm = resolve_arch_name(model), _perf(model, "bf16", "H200-SXM", tp=8).step
    touched = sm.experts_touched(batch)
    assert sm.experts_touched(1) == a.num_experts_per_tok
    most = min(a.num_experts, batch * a.num_experts_per_tok)  # every token routed apart
    # random routing touches at least 1 - 1/e of that: E (1 - (1 - k/E)^b) >= E (1 - e^(-bk/E))
    assert (1 - 1 / 2.718281828) * most - 1e-9 <= touched <= most + 1e-9
    assert touched >= sm.experts_touched(max(1, batch // 2)) - 1e-9
    # one decode step of the batch (no KV) reads the dense weights and those experts
    t = sm.time_s(batch, 0.0, 0.0) - sm.fixed_s(batch) - sm.comm_latency_s
    t -= sm.comm_s_per_token * batch
    reads = sm.dense_weight_read_s + touched * sm.expert_read_s
    assert t >= reads * (1 - 1e-9)
    assert t <= max(reads, batch * sm.compute_s_per_token) * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(DENSE), st.sampled_from(ANY_GPU), st.floats(1.0, 10.0))
def test_weights_streamed_from_host_bound_the_step_by_pcie(model, gpu, offload_gib):
    perf = _perf(model, "bf16", gpu, cpu_offload_gib=offload_gib)
    g = resolve_gpu(gpu)
    streamed = perf.cpu_offload_gib * GIB  # bytes each step copies from host RAM
    assert perf.step.time_s(1, 0.0, 0.0) >= streamed / (g.pcie_gbps * GB)
