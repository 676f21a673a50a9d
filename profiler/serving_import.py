"""Serving benchmarks a team already has, as profile engine runs (`planner profile import`).

Two layouts:
- `vllm bench serve --save-result` JSON: one closed-loop run per file (`max_concurrency`
  clients; mean prompt and output lengths from the token totals over `completed`); the
  file names no GPU, TP or quantization: the caller gives them;
- the CSV of the shared serving runs (aiconfigurator's silicon_vllm_agg.csv: `model_path`,
  `system`, `precision`, `isl`, `osl`, `batch_size`, `tp_size`, `silicon_ttft_ms`,
  `silicon_tpot_ms`): the rows of the profile's GPU type, one run per (model, TP, precision).

Each point is a DecodePoint (concurrency, lengths, mean TPOT, mean TTFT); each run notes the
file it came from (the calibration lists those).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from planner.errors import InputError
from planner.schemas.profile import DecodePoint, EngineRun, Stat

CSV_COLUMNS = (
    "model_path",
    "system",
    "precision",
    "isl",
    "osl",
    "batch_size",
    "tp_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
)
VLLM_KEYS = (
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "mean_ttft_ms",
    "mean_tpot_ms",
)


def resolve_model(model: str, arch_name: str | None = None) -> tuple[object, str | None, str]:
    """(architecture or None, the quantization the hub id names or None, why not: "" when
    resolved) of a run's model: `arch_name` (--model) when given, else the hub repo id itself
    (organisation prefix and suffixes such as -FP8, -AWQ, -Instruct dropped:
    `resolve_hub_id`). A run without an architecture is kept but calibrates nothing."""
    from planner.catalog.models import hub_quantization, resolve_arch, resolve_hub_id

    quant = hub_quantization(model)
    try:
        arch = resolve_arch(arch_name) if arch_name else resolve_hub_id(model)[0]
    except ValueError as e:
        fix = "check --model" if arch_name else "pass --model with a catalog name or a config.json"
        return None, quant, f"{e}; {fix}"
    return arch, quant, ""


def _system_matches(system: str, gpu_type: str) -> bool:
    """`h200_sxm` is the catalog's `H200-SXM`."""
    return system.replace("_", "-").lower() == gpu_type.lower()


def _quantization(precision: str, model: str) -> str:
    """The planner's name of a CSV precision (fp4: NVFP4, MXFP4 for gpt-oss; int4 weight-only)."""
    if precision == "fp4":
        return "mxfp4" if "gpt-oss" in model else "nvfp4"
    return precision


def runs_from_vllm_json(
    path: Path, model: str | None, tp: int, quantization: str | None, concurrency: int | None
) -> EngineRun:
    """The run one `vllm bench serve --save-result` file holds: `model` (--model) names its
    architecture, else the file's model_id; `quantization` (--quantization) else the one
    the model id names (-FP8, -AWQ, ...), else the file's dtype, else bf16."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"not a readable JSON file: {e}", file=str(path)) from None
    missing = [k for k in VLLM_KEYS if not isinstance(doc.get(k), int | float)]
    if missing:
        raise InputError(
            f"missing {', '.join(missing)}",
            file=str(path),
            fix="pass a file written by `vllm bench serve --save-result`",
        )
    c = concurrency or doc.get("max_concurrency")
    if not c:
        raise InputError(
            "the run records no max_concurrency (an open-loop rate run)",
            file=str(path),
            path="max_concurrency",
            fix="pass --concurrency, or import closed-loop runs (--max-concurrency)",
        )
    name = doc.get("model_id") or model or ""
    if not name:
        raise InputError("no model_id", file=str(path), fix="pass --model")
    arch, hub_quant, why = resolve_model(name, model)
    q = quantization or hub_quant or _dtype_quant(doc.get("dtype")) or "bf16"
    n = max(1, int(doc["completed"]))
    point = DecodePoint(
        concurrency=int(c),
        prompt_tokens=max(1, round(doc["total_input_tokens"] / n)),
        output_tokens=max(1, round(doc["total_output_tokens"] / n)),
        tpot_s=Stat(median=doc["mean_tpot_ms"] / 1e3, n=n),
        ttft_s=Stat(median=doc["mean_ttft_ms"] / 1e3, n=n),
    )
    notes = [f"imported: {path} (vllm bench serve)"] + ([f"not calibrated: {why}"] if why else [])
    return EngineRun(
        model=name.split("/")[-1],
        variant=q,
        tp=tp,
        quantization=q,
        arch=arch,
        decode=[point],
        notes=notes,
    )


def _dtype_quant(dtype: object) -> str | None:
    """The quantization a run's dtype names (bfloat16, float16, fp8), else None."""
    d = str(dtype or "").strip().lower()
    return {
        "bfloat16": "bf16",
        "bf16": "bf16",
        "float16": "fp16",
        "half": "fp16",
        "fp16": "fp16",
        "fp8": "fp8",
    }.get(d)


def runs_from_serving_csv(path: Path, gpu_type: str, model: str | None = None) -> list[EngineRun]:
    """The runs of `gpu_type` in a CSV of the shared serving runs' layout, one per (model, TP,
    precision); rows with attention data or expert parallelism are left out. `model`
    (--model) names every row's architecture; an empty precision is the one the model id
    names, else the row's dtype, else bf16."""
    try:
        rows = list(csv.DictReader(path.open(newline="")))
    except OSError as e:
        raise InputError(f"cannot read: {e}", file=str(path)) from None
    missing = [c for c in CSV_COLUMNS if rows and c not in rows[0]]
    if not rows or missing:
        raise InputError(
            f"missing columns {', '.join(missing) or '(empty file)'}",
            file=str(path),
            fix="columns: " + ", ".join(CSV_COLUMNS),
        )
    runs: dict[tuple[str, int, str], EngineRun] = {}
    for i, r in enumerate(rows, start=2):
        if not _system_matches(r["system"], gpu_type):
            continue
        if int(r.get("attention_dp_size") or 1) > 1 or int(r.get("moe_ep_size") or 1) > 1:
            continue
        try:
            name, tp = r["model_path"], int(r["tp_size"])
            point = DecodePoint(
                concurrency=int(r["batch_size"]),
                prompt_tokens=int(r["isl"]),
                output_tokens=int(r["osl"]),
                tpot_s=Stat(median=float(r["silicon_tpot_ms"]) / 1e3),
                ttft_s=Stat(median=float(r["silicon_ttft_ms"]) / 1e3),
            )
        except (ValueError, TypeError) as e:
            raise InputError(f"bad value: {e}", file=str(path), path=f"line {i}") from None
        arch, hub_quant, why = resolve_model(name, model)
        q = (
            _quantization(r["precision"].strip(), name)
            if r["precision"].strip()
            else hub_quant or _dtype_quant(r.get("dtype")) or "bf16"
        )
        key = (name, tp, q)
        if key not in runs:
            notes = [f"imported: {path} (serving runs CSV)"]
            runs[key] = EngineRun(
                model=name.split("/")[-1],
                variant=q,
                tp=tp,
                quantization=q,
                arch=arch,
                notes=notes + ([f"not calibrated: {why}"] if why else []),
            )
        runs[key].decode.append(point)
    return list(runs.values())
