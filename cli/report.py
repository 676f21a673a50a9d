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


Series = dict[str, list[tuple[str, float, float]]]


def front_series(result: Any, plan: Any, baselines: dict[str, dict[str, Any]]) -> Series:
    """What the left panel draws, as (label, warm GiB, switch P95 s) per series, all on the
    days the points were chosen on: `evaluated` (every feasible plan), `points`, `twins`
    (each point's `lru@` twin: its instances, reactive LRU, its warm GiB) and `baselines`."""
    twins = getattr(result, "twins", None) or {}
    out: Series = {"evaluated": [], "points": [], "twins": [], "baselines": []}
    for e in result.evaluations:
        if e.feasible:
            out["evaluated"].append(("", e.chosen.warm_gpu_gib, e.chosen.switch_p95_s))
    for p in plan.points:
        out["points"].append((p.name, p.predicted.warm_gpu_gib, p.predicted.switch_p95_s))
        t = twins.get(p.name)
        if t is not None:
            out["twins"].append((f"lru@{p.name}", t.warm_gpu_gib, t.switch_p95_s))
    for name, m in baselines.items():
        if "error" not in m:
            out["baselines"].append((name, m["warm_gpu_gib"], m["switch_p95_s"]))
    return out


def draw_report(path: Path, result: Any, plan: Any, baselines: dict[str, dict[str, Any]]) -> None:
    """Write a PNG (or an HTML page holding it) of the search and the selected placement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6.5), gridspec_kw={"width_ratios": [1, 1.3]})
    _draw_front(ax1, front_series(result, plan, baselines), plan.selected)
    _draw_placement(ax2, plan.point())
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


def _draw_front(ax1: Any, ser: Series, selected: str) -> None:
    """The left panel: every feasible plan, the Pareto points, their twins and baselines."""
    ax1.scatter(
        [x for _, x, _ in ser["evaluated"]],
        [y for _, _, y in ser["evaluated"]],
        s=14,
        c="#bbbbbb",
        label="evaluated plans",
    )
    pts = {name: (x, y) for name, x, y in ser["points"]}
    line = sorted(pts.values())  # the front, from the leanest point to the roomiest
    ax1.plot([x for x, _ in line], [y for _, y in line], "o-", c="#1f77b4", label="Pareto points")
    for k, (name, (x, y)) in enumerate(pts.items()):
        ax1.annotate(
            name + (" (selected)" if name == selected else ""),
            (x, y),
            textcoords="offset points",
            xytext=(6, 8 + 12 * (k % 2)),
            fontsize=9,
        )
    for k, (label, x, y) in enumerate(ser["twins"]):
        px, py = pts[label.removeprefix("lru@")]
        ax1.plot([px, x], [py, y], ":", c="#d62728", lw=1)  # each point to its twin
        ax1.scatter(
            [x],
            [y],
            marker="D",
            s=40,
            facecolors="none",
            edgecolors="#d62728",
            label="lru@ twins: same instances, reactive LRU, same warm GiB" if k == 0 else None,
        )
        ax1.annotate(
            label, (x, y), textcoords="offset points", xytext=(6, -12), fontsize=8, color="#d62728"
        )
    for name, x, y in ser["baselines"]:
        ax1.scatter([x], [y], marker="s", s=50, label=f"baseline {name}")
    ax1.set_xlabel("time-average warm GPU memory (GiB)")
    ax1.set_ylabel("switch latency P95 (s, log above 1 s)")
    ax1.set_yscale("symlog", linthresh=1.0)
    ax1.set_title("Switch latency vs warm GPU memory")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8, loc="center right")  # points sit top left and along the bottom


def _draw_placement(ax2: Any, point: Any) -> None:
    """The right panel: the point's instances on each GPU, awake ones then the sleepers' slot."""
    from matplotlib.patches import Patch

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
