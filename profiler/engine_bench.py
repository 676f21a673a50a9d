"""`planner profile engine`: measure real vLLM servers, one (model, variant, TP) at a time.

For each run: cold start (spawn -> `/v1/models` ready, split into weight load and engine
init from the server log), prefill latency vs prompt length (streamed time to the first token), TPOT vs
concurrency (streamed completions that all start together), the KV capacity the engine
reports, and on CUDA the sleep/wake times of levels 1 and 2 (`POST /sleep?level=N`,
`POST /wake_up`, and for level 2 `POST /collective_rpc {"method": "reload_weights"}`:
the dev endpoints `VLLM_SERVER_DEV_MODE=1` exposes).

Prompts are token-id lists (the completions API takes them), so a point has exactly the
prompt length it claims, whatever the tokenizer; each repetition draws fresh ids so the
prefix cache never serves a repetition. `ignore_eos` makes every stream exactly
`max_tokens` long. A server that does not start becomes a `failed` run with the launcher's
classified reason, and the next run goes on. Launching goes through `planner.engine`.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import LaunchError
from planner.profiler.stats import summarize
from planner.schemas.models import ModelEntry, Models, Variant
from planner.schemas.plan import EngineArgs, Instance, MemoryGib
from planner.schemas.profile import DecodePoint, EngineRun, PrefillPoint, Profile
from planner.units import GIB

# Bytes per parameter by quantization (4-bit formats carry ~6% scales and zero points).
_BYTES_PER_PARAM = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "awq": 0.53,
    "gptq": 0.53,
    "int4": 0.53,
    "mxfp4": 0.53,
}
# Quantizations vLLM applies from a flag; the others come from the checkpoint's config.
_FLAG_QUANT = {"bf16", "fp16", "fp8", "awq", "gptq"}


@dataclass(frozen=True)
class BenchConfig:
    """What one engine run measures, and how the server is started."""

    device: str = "cpu"  # cuda | cpu
    prompt_lens: tuple[int, ...] = (16, 64, 256, 1024)  # prefill points, tokens
    prefill_reps: int = 5  # requests per prefill point
    prefill_idle_s: float = (
        0.3  # pause before each prefill request: agents' requests find the engine idle
    )
    concurrencies: tuple[int, ...] = (1, 2, 4, 8)  # decode points
    decode_prompt_tokens: int = 16  # prompt of each decode request, tokens
    decode_output_tokens: int = 32  # streamed tokens per decode request
    decode_rounds: int = 2  # rounds of `concurrency` requests per decode point
    decode_min_samples: int = 8  # at least this many streams per decode point
    max_model_len: int | None = None  # None: the model's max_context
    max_num_seqs: int = 16  # --max-num-seqs
    kv_gib: float = 1.0  # CPU build: VLLM_CPU_KVCACHE_SPACE, GiB
    gpu_memory_utilization: float = 0.9  # CUDA: --gpu-memory-utilization
    enforce_eager: bool = False  # skip graph capture (faster start, slower steps)
    sleep: bool = True  # CUDA: measure sleep/wake levels 1 and 2
    start_timeout_s: float = 900.0  # spawn -> ready limit, s
    request_timeout_s: float = 300.0  # one HTTP request, s
    seed: int = 0  # prompt token ids

    @staticmethod
    def for_device(device: str, *, quick: bool = False, **kw: Any) -> BenchConfig:
        """Defaults of a device; `quick` measures fewer, shorter points (tests)."""
        if device == "cuda":
            base = dict(
                device="cuda",
                prompt_lens=(128, 512, 2048, 8192),
                concurrencies=(1, 4, 16, 32),
                decode_prompt_tokens=128,
                decode_output_tokens=64,
                max_num_seqs=64,
            )
        else:
            base = dict(device="cpu", sleep=False)
        if quick:
            base.update(
                prompt_lens=(16, 128, 512),
                prefill_reps=3,
                concurrencies=(1, 4),
                decode_output_tokens=16,
                decode_rounds=1,
            )
        base.update(kw)
        return BenchConfig(**base)


@dataclass(frozen=True)
class RunSpec:
    """One (model, variant, TP) to measure."""

    model: ModelEntry
    variant: Variant
    tp: int
    path: str = ""  # checkpoint passed to vLLM (local paths resolved against the models file)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.model.name, self.variant.name, self.tp)


def weights_gib_per_gpu(total_params_b: float, quantization: str, tp: int) -> float:
    """Rough weights on each GPU, GiB: parameters x bytes per parameter / TP."""
    return total_params_b * 1e9 * _BYTES_PER_PARAM.get(quantization, 2.0) / tp / GIB


def tp_divides(num_heads: int, num_kv_heads: int, tp: int) -> bool:
    """vLLM's TP constraint: TP divides the query heads; KV heads divide or replicate."""
    return num_heads % tp == 0 and (num_kv_heads % tp == 0 or tp % num_kv_heads == 0)


def plan_runs(
    models: Models,
    *,
    devices: int,
    memory_gib: float,
    model: str | None = None,
    variant: str | None = None,
    tps: list[int] | None = None,
    headroom: float = 0.75,
) -> tuple[list[RunSpec], list[tuple[tuple[str, str, int], str]]]:
    """(runs, skipped with why) for the local devices.

    Without `tps`, each variant gets the smallest TP whose weights fit `headroom` of a
    device (`devices` of `memory_gib` each); a listed TP is kept when it fits the devices.
    """
    runs: list[RunSpec] = []
    skipped: list[tuple[tuple[str, str, int], str]] = []
    for m in models.models:
        if model is not None and m.name != model:
            continue
        arch = m.arch
        for v in m.variants:
            if variant is not None and v.name != variant:
                continue
            options = tps or [t for t in (1, 2, 4, 8) if t <= devices]
            chosen: list[int] = []
            for tp in options:
                key = (m.name, v.name, tp)
                need = weights_gib_per_gpu(arch.total_params_b, v.quantization, tp)
                if tp > devices:
                    skipped.append((key, f"needs {tp} devices, this node has {devices}"))
                elif not tp_divides(arch.num_attention_heads, arch.num_kv_heads, tp):
                    skipped.append((key, f"tp={tp} does not divide the attention heads"))
                elif need > headroom * memory_gib:
                    skipped.append(
                        (
                            key,
                            f"weights {need:.1f} GiB per device exceed {headroom:.0%} "
                            f"of {memory_gib:.1f} GiB",
                        )
                    )
                else:
                    chosen.append(tp)
                    if tps is None:
                        break  # the smallest TP that fits
            path = resolve_path(v.path, m._base_dir)
            runs.extend(RunSpec(m, v, tp, path) for tp in chosen)
    if model is not None and not any(m.name == model for m in models.models):
        raise KeyError(model)
    return runs, skipped


def is_done(profile: Profile, key: tuple[str, str, int], *, retry_failed: bool = False) -> bool:
    """Whether the profile already holds this run (a failed one counts unless retried)."""
    for r in profile.engine:
        if (r.model, r.variant, r.tp) == key:
            if r.status == "ok":
                return bool(r.prefill and r.decode)
            return not retry_failed
    return False


def looks_local(path: str) -> bool:
    """Whether a variant path names a local directory (not a hub id like `org/name`)."""
    if not path:
        return False
    if path.startswith(("/", "./", "../", "~")) or Path(path).exists():
        return True
    return path.count("/") != 1  # hub ids are exactly `org/name`


def resolve_path(path: str, base_dir: Path | None) -> str:
    """A relative local checkpoint path is relative to the models file (hub ids stay).

    `org/name` is ambiguous: it is a local path when it exists next to the models file.
    """
    if not path or base_dir is None:
        return path
    p = Path(path).expanduser()
    if p.is_absolute():
        return str(p)
    near = (base_dir / p).resolve()
    return str(near) if looks_local(path) or near.exists() else path


def precheck_path(path: str) -> str | None:
    """Why a local checkpoint path cannot be served (None when it looks servable).

    Checked before spawning: a bad path would otherwise cost a server's import time.
    """
    if not path:
        return "the variant has no path"
    if not looks_local(path):
        return None
    p = Path(path).expanduser()
    if not p.is_dir():
        return f"{path} is not a directory"
    if not (p / "config.json").is_file():
        return f"{path} has no config.json"
    return None


def vocab_size_of(path: str, fallback: int) -> int:
    """Vocabulary size from a local checkpoint's config.json, else `fallback`."""
    try:
        cfg = json.loads((Path(path).expanduser() / "config.json").read_text())
        return int(cfg.get("vocab_size") or fallback)
    except (OSError, ValueError, TypeError):
        return fallback


def prompt_ids(n_tokens: int, vocab: int, rng: Any) -> list[int]:
    """`n_tokens` random token ids, clear of the low ids that tokenizers reserve for specials."""
    lo = min(16, max(1, vocab // 4))
    hi = max(lo + 1, min(vocab, 30000))
    return [int(x) for x in rng.integers(lo, hi, size=n_tokens)]


_KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU|TPU)[\w +]* KV cache size: ([\d,]+) tokens")
_BLOCKS = re.compile(r"num_gpu_blocks is: (\d+)")
_BLOCK_SIZE = re.compile(r"block_size\D{1,5}(\d+)")


def parse_kv_capacity(log_text: str) -> int | None:
    """Tokens the engine's KV cache holds, from its start-up log (last report wins)."""
    found = _KV_TOKENS.findall(log_text)
    if found:
        return int(found[-1].replace(",", ""))
    return None


def parse_metrics_kv(metrics_text: str) -> int | None:
    """KV capacity from `/metrics` (`vllm:cache_config_info` num_gpu_blocks x block_size)."""
    for line in metrics_text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            try:
                return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
            except (KeyError, ValueError):
                return None
    return None


Chunk = tuple[float, int]  # (arrival time s, completion tokens so far; -1: not reported)

# Every streamed chunk carries the running token count (a chunk may hold several tokens).
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}


def chunk_tokens(line: str) -> int | None:
    """Completion tokens so far from one SSE line; None for lines that carry no token.

    The final usage-only chunk (no choices) and `[DONE]` are not tokens; -1 when a token
    chunk has no usage (a server without continuous usage stats).
    """
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return None
    try:
        d = json.loads(payload)
    except ValueError:
        return None
    if not d.get("choices"):
        return None
    n = (d.get("usage") or {}).get("completion_tokens")
    return int(n) if n is not None else -1


def tpot_of(chunks: list[Chunk]) -> float | None:
    """Time per output token of one stream: (last - first chunk) / tokens between them.

    Without token counts each chunk counts as one token.
    """
    if len(chunks) < 2:
        return None
    (t0, n0), (t1, n1) = chunks[0], chunks[-1]
    tokens = n1 - n0 if n0 >= 0 and n1 >= 0 else len(chunks) - 1
    return (t1 - t0) / tokens if tokens > 0 else None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def instance_for(spec: RunSpec, cfg: BenchConfig, port: int) -> Instance:
    """The plan Instance `planner.engine.build_argv` turns into the server's argv."""
    q = spec.variant.quantization
    mml = cfg.max_model_len or spec.model.max_context
    return Instance(
        id=f"profile-{spec.model.name}-{spec.variant.name}-tp{spec.tp}",
        model=spec.model.name,
        variant=spec.variant.name,
        node="local",
        gpus=list(range(spec.tp)) if cfg.device == "cuda" else [],
        tp=spec.tp,
        tier="host" if cfg.device == "cuda" and cfg.sleep else "gpu",  # host: sleep mode on
        memory_gib=MemoryGib(weights=0, kv=cfg.kv_gib, overhead=0),
        engine=EngineArgs(
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=mml,
            max_num_seqs=cfg.max_num_seqs,
            quantization=q if q in _FLAG_QUANT else None,
            enforce_eager=cfg.enforce_eager,
        ),
        port=port,
    )


# ---------------------------------------------------------------- HTTP measurements


def stream_body(served: str, ids: list[int], out_tokens: int) -> dict:
    """A streamed completion of exactly `out_tokens` tokens, with running token counts."""
    return {
        "model": served,
        "prompt": ids,
        "max_tokens": out_tokens,
        "min_tokens": out_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": STREAM_OPTIONS,
    }


async def stream_completion(
    host: str, port: int, body: dict, timeout_s: float = 600.0
) -> tuple[float, list[Chunk]]:
    """POST a streamed completion over a bare asyncio connection; (send time, token chunks).

    A full HTTP client costs enough CPU per chunk that, with many concurrent streams on a
    small host, chunks wait in the socket and are time-stamped late and in bursts. This
    reader does only what the measurement needs: one HTTP/1.1 request, then chunked
    transfer decoding and SSE `data:` lines, each time-stamped as it is decoded.
    """
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode()

    async def run() -> tuple[float, list[Chunk]]:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            t0 = time.perf_counter()
            writer.write(head + payload)
            await writer.drain()
            status = (await reader.readline()).decode(errors="replace")
            if " 200 " not in status:
                raise RuntimeError(f"completion request failed: {status.strip()}")
            chunked = False
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                    chunked = True
            chunks: list[Chunk] = []
            buf = b""
            while True:
                if chunked:
                    size_line = await reader.readline()
                    if not size_line:
                        break
                    size = int(size_line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        break
                    data = (await reader.readexactly(size + 2))[:-2]  # chunk + CRLF
                else:
                    data = await reader.read(65536)
                    if not data:
                        break
                buf += data
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    n = chunk_tokens(raw.decode(errors="replace").strip())
                    if n is not None:
                        chunks.append((time.perf_counter(), n))
            return t0, chunks
        finally:
            writer.close()

    return await asyncio.wait_for(run(), timeout_s)


class Client:
    """Timed requests to one server (httpx imported here: the CLI stays light)."""

    def __init__(self, port: int, served: str, timeout_s: float, host: str = "127.0.0.1"):
        import httpx

        self.base = f"http://{host}:{port}"
        self.host, self.port = host, port
        self.served = served
        self.timeout_s = timeout_s
        self.http = httpx.Client(base_url=self.base, timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def complete_s(self, ids: list[int], max_tokens: int = 1) -> float:
        """Wall time of one non-streamed completion, s."""
        body = {
            "model": self.served,
            "prompt": ids,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
        }
        t0 = time.perf_counter()
        r = self.http.post("/v1/completions", json=body)
        dt = time.perf_counter() - t0
        r.raise_for_status()
        return dt

    def post_s(self, path: str, body: dict | None = None) -> tuple[float, int]:
        """(seconds, status) of a POST to a dev endpoint."""
        t0 = time.perf_counter()
        r = self.http.post(path, json=body) if body is not None else self.http.post(path)
        return time.perf_counter() - t0, r.status_code

    def metrics(self) -> str:
        r = self.http.get("/metrics")
        return r.text if r.status_code == 200 else ""

    def streams(self, prompts: list[list[int]], out_tokens: int) -> list[tuple[float, list[Chunk]]]:
        """Start every prompt at once as a stream; per request (start, token chunks)."""

        async def go() -> list[tuple[float, list[Chunk]]]:
            return list(
                await asyncio.gather(
                    *(
                        stream_completion(
                            self.host,
                            self.port,
                            stream_body(self.served, p, out_tokens),
                            self.timeout_s,
                        )
                        for p in prompts
                    )
                )
            )

        return asyncio.run(go())


def measure_prefill(
    client: Client, cfg: BenchConfig, vocab: int, rng: Any, tick: Callable[[str], None]
) -> list[PrefillPoint]:
    """Time to the first streamed token of one prompt at each prompt length.

    Streamed, like the TTFT a user sees and the simulator predicts: the response's own
    assembly after the token is not part of it.
    """
    out: list[PrefillPoint] = []
    for n in cfg.prompt_lens:
        samples = []
        for _ in range(cfg.prefill_reps):
            time.sleep(
                cfg.prefill_idle_s
            )  # an idle engine parks its threads; waking them is part of TTFT
            start, chunks = client.streams([prompt_ids(n, vocab, rng)], 2)[
                0
            ]  # a real stream goes on
            if not chunks:
                raise RuntimeError(f"a {n}-token prompt streamed no token")
            samples.append(chunks[0][0] - start)
        out.append(PrefillPoint(prompt_tokens=n, latency_s=summarize(samples)))
        tick(f"prefill {n} tokens")
    return out


GULP_GAP_S = 0.0002  # chunks closer than this were read together, not produced a step apart


def burst(chunks: list[Chunk], out_tokens: int) -> bool:
    """Whether half a stream's tokens or more arrived in one gulp.

    The engine emits a token per stream per step (a millisecond or more apart). Tokens that
    arrive within `GULP_GAP_S` of each other were held back, by a reader or by the server's
    HTTP process starved of CPU, and their spacing says nothing about the engine's steps.
    """
    if out_tokens < 4 or not chunks:
        return False
    big = run = 0
    prev_t, prev_n = None, 0
    for t, n in chunks:
        step = n - prev_n if n >= 0 and prev_n >= 0 else 1  # tokens this chunk carries
        run = run + step if prev_t is not None and t - prev_t < GULP_GAP_S else step
        big = max(big, run)
        prev_t, prev_n = t, n
    return big >= out_tokens / 2


def gulped_tpot(
    start: float, chunks: list[Chunk], out_tokens: int, prefill_s: float
) -> float | None:
    """TPOT of a stream read in one burst: end-to-end time minus the prefill, per later token.

    Its chunk spacing is meaningless, but its last token still arrives after the whole
    generation: (last arrival - send - prefill latency) / (tokens - 1).
    """
    if out_tokens < 2 or not chunks:
        return None
    return max(0.0, chunks[-1][0] - start - prefill_s) / (out_tokens - 1)


def measure_decode(
    client: Client,
    cfg: BenchConfig,
    vocab: int,
    rng: Any,
    tick: Callable[[str], None],
    notes: list[str] | None = None,
    prefill_s: float | None = None,
) -> list[DecodePoint]:
    """TPOT (and TTFT) of `c` streams started together, for each concurrency `c`.

    A stream read in one burst (`burst`) gets `gulped_tpot` when the prefill latency of
    its prompt (`prefill_s`) is known, else it is left out; `notes` counts them.
    """
    out: list[DecodePoint] = []
    o = cfg.decode_output_tokens
    for c in cfg.concurrencies:
        tpots: list[float] = []
        ttfts: list[float] = []
        bursts = 0
        # enough rounds that even concurrency 1 gives `decode_min_samples` streams
        for _ in range(max(cfg.decode_rounds, math.ceil(cfg.decode_min_samples / c))):
            prompts = [prompt_ids(cfg.decode_prompt_tokens, vocab, rng) for _ in range(c)]
            for start, chunks in client.streams(prompts, o):
                if burst(chunks, o):
                    bursts += 1
                    t = gulped_tpot(start, chunks, o, prefill_s) if prefill_s is not None else None
                else:
                    t = tpot_of(chunks)
                    if chunks:
                        ttfts.append(chunks[0][0] - start)  # a gulped stream's first token is late
                if t is not None:
                    tpots.append(t)
        if tpots:
            out.append(
                DecodePoint(
                    concurrency=c,
                    output_tokens=o,
                    prompt_tokens=cfg.decode_prompt_tokens,
                    tpot_s=summarize(tpots),
                    ttft_s=summarize(ttfts) if ttfts else None,
                )
            )
        if bursts and notes is not None:
            how = (
                "TPOT from end-to-end time minus prefill"
                if prefill_s is not None
                else "not in TPOT"
            )
            notes.append(
                f"decode x{c}: {bursts} stream(s) arrived in one burst (HTTP process starved of CPU); {how}"
            )
        tick(f"decode x{c}")
    return out


def prefill_at(points: list[PrefillPoint], prompt_tokens: int) -> float | None:
    """Median prefill latency at the measured prompt length closest to `prompt_tokens`."""
    if not points:
        return None
    return min(points, key=lambda p: abs(p.prompt_tokens - prompt_tokens)).latency_s.median


def measure_sleep(client: Client, run: EngineRun) -> None:
    """Sleep/wake times of levels 1 and 2 (CUDA builds with sleep mode and dev endpoints)."""
    s1, st = client.post_s("/sleep?level=1")
    if st != 200:
        run.notes.append(f"POST /sleep?level=1 answered {st}: is VLLM_SERVER_DEV_MODE=1 set?")
        return
    w1, st = client.post_s("/wake_up")
    run.sleep_l1_s, run.wake_l1_s = s1, w1
    if st != 200:
        run.notes.append(f"POST /wake_up answered {st}")
        return
    s2, st = client.post_s("/sleep?level=2")
    if st != 200:
        run.notes.append(f"POST /sleep?level=2 answered {st}")
        return
    w2, st = client.post_s("/wake_up")
    # level 2 dropped the weights: waking means reading them again from the checkpoint
    r2, st2 = client.post_s("/collective_rpc", {"method": "reload_weights"})
    run.sleep_l2_s, run.wake_l2_s = s2, w2 + r2
    if st2 != 200:
        run.notes.append(f"reload_weights answered {st2}: wake_l2_s lacks the weight reload")


# ---------------------------------------------------------------- one run


@dataclass
class RunResult:
    """An engine run and where its server log is."""

    run: EngineRun
    log_path: Path
    steps: list[str] = field(default_factory=list)


def steps_of(cfg: BenchConfig) -> int:
    """Progress ticks of one successful run (start + points + sleep)."""
    return (
        1
        + len(cfg.prompt_lens)
        + len(cfg.concurrencies)
        + (1 if cfg.device == "cuda" and cfg.sleep else 0)
    )


def base_run(spec: RunSpec, cfg: BenchConfig) -> EngineRun:
    """The run record before any measurement: identity and engine settings."""
    inst_mml = cfg.max_model_len or spec.model.max_context
    return EngineRun(
        model=spec.model.name,
        variant=spec.variant.name,
        tp=spec.tp,
        quantization=spec.variant.quantization,
        arch=spec.model.arch,
        max_model_len=inst_mml,
        max_num_seqs=cfg.max_num_seqs,
    )


def fit_to_context(cfg: BenchConfig, max_model_len: int) -> BenchConfig:
    """The config without prompt lengths the server's context cannot hold (prompt + 1 token)."""
    from dataclasses import replace

    lens = tuple(n for n in cfg.prompt_lens if n + 1 <= max_model_len)
    dec_prompt = min(cfg.decode_prompt_tokens, max(1, max_model_len - cfg.decode_output_tokens))
    return replace(cfg, prompt_lens=lens, decode_prompt_tokens=dec_prompt)


def profile_run(
    spec: RunSpec,
    cfg: BenchConfig,
    *,
    log_dir: Path,
    port: int | None = None,
    tick: Callable[[str], None] = lambda _label: None,
) -> RunResult:
    """Start a server for `spec`, measure it, stop it; a failed start becomes a failed run."""
    import numpy as np

    from planner import engine

    run = base_run(spec, cfg)
    cfg = fit_to_context(cfg, run.max_model_len or spec.model.max_context)
    log_path = log_dir / f"{spec.model.name}-{spec.variant.name}-tp{spec.tp}.log"
    model_path = spec.path or spec.variant.path
    bad = precheck_path(model_path)
    if bad is not None:
        run.status, run.reason, run.detail = "failed", "bad_model_path", bad
        return RunResult(run, log_path)
    port = port or free_port()
    inst = instance_for(spec, cfg, port)
    argv, env = engine.build_argv(
        inst,
        model_path=model_path,
        served_name=spec.model.name,
        device="cuda" if cfg.device == "cuda" else "cpu",
    )
    log_path.unlink(missing_ok=True)  # start-up timings are read from this run's log only
    t0 = time.monotonic()
    proc = engine.start_server(argv, env, log_path)
    client = None
    try:
        try:
            engine.wait_ready("127.0.0.1", port, proc, log_path, cfg.start_timeout_s)
        except LaunchError as e:
            run.status, run.reason = "failed", e.reason
            run.detail = (e.log_tail or "")[-4000:]
            return RunResult(run, log_path)
        run.cold_start_s = time.monotonic() - t0
        log = engine.read_tail(log_path, max_bytes=4_000_000)
        timings = engine.parse_startup_log(log)
        run.weight_load_s = timings.get("weight_load_s")
        run.engine_init_s = timings.get("engine_init_s")
        run.kv_capacity_tokens = parse_kv_capacity(log)
        tick("start")
        client = Client(port, spec.model.name, cfg.request_timeout_s)
        if run.kv_capacity_tokens is None:
            run.kv_capacity_tokens = parse_metrics_kv(client.metrics())
        rng = np.random.default_rng(cfg.seed)
        vocab = vocab_size_of(model_path, spec.model.arch.vocab_size)
        try:
            # warm-up: the first plain and the first streamed request take slow first-use paths
            client.complete_s(prompt_ids(8, vocab, rng), max_tokens=4)
            client.streams([prompt_ids(8, vocab, rng)], 4)
            run.prefill = measure_prefill(client, cfg, vocab, rng, tick)
            run.decode = measure_decode(
                client,
                cfg,
                vocab,
                rng,
                tick,
                run.notes,
                prefill_at(run.prefill, cfg.decode_prompt_tokens),
            )
            if cfg.device == "cuda" and cfg.sleep:
                measure_sleep(client, run)
                tick("sleep/wake")
        except Exception as e:  # a request failed: keep what was measured, say why
            run.status, run.reason = "failed", "measurement_error"
            run.detail = f"{type(e).__name__}: {e}\n" + engine.read_tail(log_path, 4000)[-3000:]
        return RunResult(run, log_path)
    finally:
        if client is not None:
            client.close()
        engine.stop_server(proc)


# ---------------------------------------------------------------- one node (local or a Ray task)


def run_node(
    models_data: dict,
    models_file: str,
    node: str,
    cfg_kwargs: dict,
    *,
    quick: bool = False,
    model: str | None = None,
    variant: str | None = None,
    tps: list[int] | None = None,
    skip: list[tuple[str, str, int]] | None = None,
    log_dir: str | None = None,
    device: str | None = None,
) -> dict:
    """Profile this node's engine runs, except the keys in `skip`; plain data back.

    What `planner profile engine --ray` runs on each node: the models file travels as data
    (`models_file` only resolves relative checkpoint paths, which must exist on the node).
    Returns {"gpu_type", "environment", "runs", "skipped"}.
    """
    import tempfile

    from planner.profiler import store
    from planner.profiler.devices import discover_node
    from planner.profiler.hardware import type_for
    from planner.schemas import parse

    models = parse(models_data, "models", models_file)
    info = discover_node()
    dev = device or ("cuda" if info.gpus else "cpu")
    if dev == "cuda" and info.gpus:
        first = info.gpus[0]
        gpu_type = type_for(first.name, first.memory_gib)
        same = [g for g in info.gpus if g.gpu_type == first.gpu_type]
        devices, mem, name = len(same), min(g.memory_gib for g in same), first.name
    else:
        gpu_type, devices, mem, name = "cpu", 1, info.ram_gib / 2, "cpu"
    specs, skipped = plan_runs(
        models, devices=devices, memory_gib=mem, model=model, variant=variant, tps=tps
    )
    cfg = BenchConfig.for_device(dev, quick=quick, **cfg_kwargs)
    done = {tuple(k) for k in (skip or [])}
    logs = Path(log_dir or tempfile.mkdtemp(prefix=f"planner-profile-{node}-"))
    runs = [profile_run(s, cfg, log_dir=logs).run for s in specs if s.key not in done]
    env = store.environment(name, driver=info.driver, cuda=info.cuda)
    return {
        "gpu_type": gpu_type,
        "environment": env.model_dump(mode="json"),
        "runs": [r.model_dump(mode="json") for r in runs],
        "skipped": [[list(k), why] for k, why in skipped],
    }
