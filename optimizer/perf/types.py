"""What the perf model hands to the simulator and the optimizer: plain frozen numbers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepModel:
    """Time of one continuous-batching engine step on one instance (all TP ranks together).

    A step reads the active weights once, reads the KV of every context token in the batch,
    computes the linear layers for every new token (prefill chunk tokens + one per decoding
    sequence) and attention for every (new token, context token) pair. Memory and compute
    overlap, so the step takes the larger of the two, plus fixed overhead and TP all-reduce.
    """

    overhead_s: float  # scheduler + kernel launches per step, s
    dense_weight_read_s: float  # non-expert weights read once per step, s
    expert_read_s: float  # one routed expert of every MoE layer read once, s (0: dense)
    num_experts: int  # routed experts per MoE layer (0: dense)
    experts_per_tok: int  # routed experts each token activates
    kv_read_s_per_token: float  # one context token's KV over all layers, s/token
    compute_s_per_token: float  # linear layers for one new token, s/token
    attn_s_per_pair: float  # attention for one (new token, context token) pair, s
    comm_s_per_token: float  # TP all-reduce payload of one new token, s/token
    comm_latency_s: float  # TP all-reduce latency per step (2 per layer + the arch's own), s
    # vLLM replays CUDA graphs only for steps of at most min(2 max_num_seqs, 512) tokens
    # (its max_cudagraph_capture_size); larger steps launch every kernel from the CPU
    graph_max_tokens: int = 1 << 62  # largest step (new tokens) that runs as a CUDA graph
    eager_s: float = 0.0  # what a step without CUDA graphs adds (kernel launches), s
    # which kernel layer gave the linear layers' compute rate (optimizer/perf/kernels.py)
    kernel_source: str = "roofline"  # measured | interpolated | roofline
    # per sequence in the step, whatever its tokens: scheduling, sampling, output handling
    # (the CPU build: the step model's other terms are per token or per context token)
    seq_s: float = 0.0  # s per sequence per step

    def experts_touched(self, new_tokens: float) -> float:
        """Expected distinct routed experts a step of `new_tokens` tokens reads per layer."""
        if self.num_experts == 0 or new_tokens <= 0:
            return 0.0
        miss = (1.0 - self.experts_per_tok / self.num_experts) ** new_tokens
        return self.num_experts * (1.0 - miss)

    def time_s(
        self, new_tokens: float, kv_tokens: float, attn_pairs: float, seqs: float = 1.0
    ) -> float:
        """One step of `seqs` sequences: `new_tokens` computed, `kv_tokens` of KV read,
        `attn_pairs` scored, s."""
        if new_tokens <= 0:
            return 0.0
        mem_s = (
            self.dense_weight_read_s
            + self.expert_read_s * self.experts_touched(new_tokens)
            + self.kv_read_s_per_token * kv_tokens
        )
        compute_s = self.compute_s_per_token * new_tokens + self.attn_s_per_pair * attn_pairs
        comm_s = (
            self.comm_latency_s + self.comm_s_per_token * new_tokens if self.comm_latency_s else 0.0
        )
        fixed_s = self.fixed_s(new_tokens) + self.seq_s * seqs
        return fixed_s + max(mem_s, compute_s) + comm_s

    def fixed_s(self, new_tokens: float) -> float:
        """The fixed cost of a step of `new_tokens` tokens: with or without CUDA graphs, s."""
        return self.overhead_s + (self.eager_s if new_tokens > self.graph_max_tokens else 0.0)


WAKE_KNOTS = 4  # knots of the idle wake-up curve the simulator's engines carry


@dataclass(frozen=True)
class InstancePerf:
    """Everything the simulator and the MILP need about one (model, variant, GPU type, TP, engine)."""

    weights_gib_per_gpu: float  # weights resident on each GPU, GiB
    kv_gib_per_gpu: float  # KV cache on each GPU, GiB
    overhead_gib_per_gpu: float  # activations + CUDA graphs + CUDA context, GiB
    context_gib_per_gpu: float  # what a sleeping process still holds on each GPU, GiB
    kv_bytes_per_token: float  # KV of one token over all layers and all GPUs, bytes
    max_kv_tokens: int  # tokens the KV cache holds, all sequences together
    max_num_seqs: int  # batch cap
    chunk_tokens: int  # chunked-prefill token budget per step
    step: StepModel  # step-time model
    cold_start_s: float  # process spawn -> ready (engine init + weights from disk), s
    wake_host_s: float  # sleep level 1 -> awake (weights back from host RAM), s
    wake_disk_s: float  # level 2 / stopped -> awake, s
    sleep_s: float  # awake -> asleep (level 1 offload), s
    weights_host_gib: float  # host RAM a level-1 sleeper holds (all its GPUs' weights), GiB
    prefill_overhead_s: float = 0.0  # fixed per-request cost (tokenize, schedule, detokenize), s
    prompt_s_per_token: float = 0.0  # per-request cost per prompt token (tokenize, transfer), s
    cpu_offload_gib: float = 0.0  # weights kept in host RAM per GPU and streamed each step, GiB
    max_model_len: int = 0  # longest sequence the engine accepts, tokens (0: unknown)
    step_jitter_cv: float = 0.0  # step times' coefficient of variation in the simulator (0: off)
    # the fixed per-request cost of one that reaches an engine already at work (None: the
    # same as prefill_overhead_s, which is then the cost of one that finds it idle)
    busy_prefill_overhead_s: float | None = None  # s
    # (idle s, share of idle_wake_s) knots of the wake-up by the time the engine was idle
    # (Calib.idle_wake_curve); empty: the whole wake-up after any quiet
    idle_wake_curve: tuple[tuple[float, float], ...] = ()

    @property
    def busy_delay_s(self) -> float:
        """Sent -> at the engine (less the per-token part) of a request the engine need not
        wake for: the busy overhead, at most the idle one, s."""
        b = self.busy_prefill_overhead_s
        return self.prefill_overhead_s if b is None else min(b, self.prefill_overhead_s)

    @property
    def idle_wake_s(self) -> float:
        """What a request that finds the engine idle pays on top of `busy_delay_s`: the
        engine waking (CPU build: its parked threads), s; 0 without a busy overhead."""
        return self.prefill_overhead_s - self.busy_delay_s

    def wake_knots(self) -> tuple[float, ...]:
        """`WAKE_KNOTS` idle times, then the wake-up at each, s (`steptime.wake_after_s`):
        `idle_wake_curve` resampled (the first and last knots kept) or padded with its last."""
        pts = list(self.idle_wake_curve) or [(0.0, 1.0)]
        if len(pts) > WAKE_KNOTS:
            pts = [pts[round(i * (len(pts) - 1) / (WAKE_KNOTS - 1))] for i in range(WAKE_KNOTS)]
        pts += [pts[-1]] * (WAKE_KNOTS - len(pts))
        return tuple(g for g, _ in pts) + tuple(w * self.idle_wake_s for _, w in pts)

    @property
    def fits(self) -> bool:
        """Whether vLLM would start: the KV cache holds one sequence of max_model_len tokens."""
        return self.max_kv_tokens > 0 and self.max_kv_tokens >= self.max_model_len

    def wake_s(self, tier: str) -> float:
        """Seconds to wake from `tier` (host: level-1 sleep, else from disk)."""
        return self.wake_host_s if tier == "host" else self.wake_disk_s

    @property
    def awake_gib_per_gpu(self) -> float:
        """Memory on each GPU while awake, GiB."""
        return self.weights_gib_per_gpu + self.kv_gib_per_gpu + self.overhead_gib_per_gpu
