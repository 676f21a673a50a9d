"""`optimize --report`: the Pareto front beside the baselines, and the per-GPU placement map."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

from planner.io import atomic_write_bytes, atomic_write_text

_TIER_COLOURS = {"gpu": "#1f77b4", "host": "#ff7f0e", "disk": "#9467bd"}


def _bar(ax, row: int, left: float, inst, height: float, offset: float) -> None:
    w = inst.memory_gib.total
    ax.barh(
        row + offset, w, left=left, height=height, color=_TIER_COLOURS[inst.tier], edgecolor="white"
    )
    ax.text(
        left + w / 2,
        row + offset,
        f"{inst.id} {inst.variant}",
        ha="center",
        va="center",
        fontsize=7,
        color="white",
    )


def draw_report(path: Path, result: Any, plan: Any, baselines: dict[str, dict[str, Any]]) -> None:
    """Write a PNG (or an HTML page holding it) of the search and the selected placement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6.5), gridspec_kw={"width_ratios": [1, 1.3]})
    evs = [e for e in result.evaluations if e.feasible]
    ax1.scatter(
        [e.metrics["warm_gpu_gib"] for e in evs],
        [e.metrics["switch_p95_s"] for e in evs],
        s=14,
        c="#bbbbbb",
        label="evaluated plans",
    )
    pts = [(p.name, p.predicted) for p in plan.points]
    ax1.plot(
        [p.warm_gpu_gib for _, p in pts],
        [p.switch_p95_s for _, p in pts],
        "o-",
        c="#1f77b4",
        label="Pareto points",
    )
    for k, (name, p) in enumerate(pts):
        ax1.annotate(
            name + (" (selected)" if name == plan.selected else ""),
            (p.warm_gpu_gib, p.switch_p95_s),
            textcoords="offset points",
            xytext=(6, 8 + 12 * (k % 2)),
            fontsize=9,
        )
    for name, m in baselines.items():
        if "error" in m:
            continue
        ax1.scatter(
            [m["warm_gpu_gib"]], [m["switch_p95_s"]], marker="s", s=50, label=f"baseline {name}"
        )
    ax1.set_xlabel("time-average warm GPU memory (GiB)")
    ax1.set_ylabel("switch latency P95 (s, log above 1 s)")
    ax1.set_yscale("symlog", linthresh=1.0)
    ax1.set_title("Switch latency vs warm GPU memory")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)

    point = plan.point()
    gpus: list[tuple[str, int]] = sorted({(i.node, g) for i in point.instances for g in i.gpus})
    rows = {g: k for k, g in enumerate(gpus)}
    awake_end: dict[tuple[str, int], float] = {}
    for inst in (i for i in point.instances if i.tier == "gpu"):
        for g in inst.gpus:
            base = awake_end.get((inst.node, g), 0.0)
            _bar(ax2, rows[(inst.node, g)], base, inst, 0.8, 0.0)
            awake_end[(inst.node, g)] = base + inst.memory_gib.total
    # Sleepers on a GPU time-share one slot after the awake instances: drawn side by side in height.
    sleepers: dict[tuple[str, int], list] = {}
    for inst in (i for i in point.instances if i.tier != "gpu"):
        for g in inst.gpus:
            sleepers.setdefault((inst.node, g), []).append(inst)
    for key, insts in sleepers.items():
        h = 0.8 / len(insts)
        for k, inst in enumerate(insts):
            _bar(ax2, rows[key], awake_end.get(key, 0.0), inst, h, -0.4 + h * (k + 0.5))
    ax2.set_yticks(range(len(gpus)), [f"{n}:{g}" for n, g in gpus])
    ax2.invert_yaxis()
    ax2.set_xlabel("GPU memory when awake (GiB); host/disk sleepers on a GPU share one slot")
    ax2.set_title(f"Placement of point '{point.name}'")
    ax2.legend(
        handles=[Patch(color=c, label=f"tier {t}") for t, c in _TIER_COLOURS.items()], fontsize=8
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    if path.suffix != ".html":
        atomic_write_bytes(path, buf.getvalue())
    else:
        b64 = base64.b64encode(buf.getvalue()).decode()
        atomic_write_text(
            path,
            f"<!doctype html><meta charset=utf-8><title>planner report</title>"
            f"<h1>planner optimize</h1><img src='data:image/png;base64,{b64}'>\n",
        )
