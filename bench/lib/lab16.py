"""Shared set-up of the optimize benches: the lab16 example and its synthetic week."""

from __future__ import annotations

from pathlib import Path

from planner.cli import inputs
from planner.schemas import load_cluster, load_models, load_slo

ROOT = Path(__file__).resolve().parents[2]
LAB16 = ROOT / "plans" / "examples" / "lab16"


def lab16(seed: int = 0):
    """(cluster, models, slo, trace) of the bundled example, trace from its workload spec."""
    cl = load_cluster(LAB16 / "cluster.yaml")
    ms = load_models(LAB16 / "models.yaml")
    sl = load_slo(LAB16 / "slo.yaml")
    trace = inputs.workload(LAB16 / "workload.yaml", ms, seed)
    return cl, ms, sl, trace
