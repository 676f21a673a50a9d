"""Built-in GPU catalog: the rows of `gpus.yaml` (spec-sheet numbers, each with its source).

Rates are dense (no sparsity). On GeForce cards `bf16_tflops` is the FP32-accumulate tensor
rate (what vLLM's GEMMs get), not the FP16-accumulate headline.
"""

from __future__ import annotations

import difflib

from planner.catalog.schema import GpuCatalog, GpuSpec, load_catalog

__all__ = ["GPUS", "GpuSpec", "resolve_gpu"]


def _load() -> dict[str, GpuSpec]:
    cat = load_catalog("gpus")
    assert isinstance(cat, GpuCatalog)
    return {g.name: GpuSpec(**g.model_dump()) for g in cat.gpus}


GPUS: dict[str, GpuSpec] = _load()


def resolve_gpu(name: str) -> GpuSpec:
    """Catalog lookup by name (case-insensitive); unknown names raise ValueError with a hint."""
    if name in GPUS:
        return GPUS[name]
    lower = {k.lower(): k for k in GPUS}
    if name.lower() in lower:
        return GPUS[lower[name.lower()]]
    close = difflib.get_close_matches(name, list(GPUS), n=3, cutoff=0.5)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    raise ValueError(
        f"{name!r} is not a known GPU type{hint}; see `planner catalog gpus` or give an inline spec"
    )
