"""Shared set-up of the optimize benches: the bundled examples and their synthetic weeks."""

from __future__ import annotations

from pathlib import Path

from planner.app import files as inputs
from planner.optimizer.workload.synth import synth
from planner.optimizer.workload.synth_spec import bind_models
from planner.schemas import load_cluster, load_models, load_slo

ROOT = Path(__file__).resolve().parents[2]
LAB16 = ROOT / "plans" / "examples" / "lab16"
EXAMPLES = ("lab16", "edge6")  # the clusters the optimize benches run on


def example_dir(name: str) -> Path:
    """plans/examples/NAME, else the benches' own cluster bench/data/substitute/NAME."""
    d = ROOT / "plans" / "examples" / name
    return d if d.is_dir() else ROOT / "bench" / "data" / "substitute" / name


def example(name: str, seed: int = 0, users: int | None = None):
    """(cluster, models, slo, trace) of plans/examples/<name>, the trace from its workload
    spec with `seed` (and `users` developers instead of the spec's)."""
    d = example_dir(name)
    cl = load_cluster(d / "cluster.yaml")
    ms = load_models(d / "models.yaml")
    sl = load_slo(d / "slo.yaml")
    spec = inputs.synth_spec(d / "workload.yaml")
    if users is not None:
        spec = spec.model_copy(update={"users": users})
    spec, _ = bind_models(spec, ms.names)
    limits = {m.name: m.max_context for m in ms.models}  # as `optimize` generates it
    return cl, ms, sl, synth(spec, seed=seed, max_context=limits)


def lab16(seed: int = 0, users: int | None = None):
    """(cluster, models, slo, trace) of the bundled lab16 example."""
    return example("lab16", seed, users)
