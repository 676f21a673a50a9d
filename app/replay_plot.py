"""`planner adjust --replay TRACE --plot FILE.png`: the replay's per-hour series as a picture:
traffic per model, the point in force, warm GiB and switch P95 by hour."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from planner.errors import InputError


def check_plot_name(path: Path | None) -> None:
    """A plot is a .png: say so before the replay, not after it."""
    if path is not None and path.suffix != ".png":
        raise InputError("unsupported plot format", file=str(path), fix="use a .png file name")


def draw_replay(path: Path, out: dict[str, Any], title: str) -> None:
    """Write the PNG of a replay's `series` (adjuster/replay.py) to `path` atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from planner.io import atomic_write_bytes

    rows = out["series"]
    hours = np.array([r["start_s"] for r in rows], float) / 3600.0
    models = sorted({m for r in rows for m in r["requests"]})
    points = list(dict.fromkeys([r["point"] for r in rows]))
    order = sorted(
        points, key=lambda p: -np.mean([r["warm_gpu_gib"] for r in rows if r["point"] == p])
    )
    fig, axes = plt.subplots(
        4, 1, figsize=(13, 10), sharex=True, gridspec_kw={"height_ratios": [2, 1, 1.4, 1.4]}
    )
    ax = axes[0]
    bottom = np.zeros(len(rows))
    for m in models:
        n = np.array([r["requests"].get(m, 0) for r in rows], float)
        ax.bar(hours, n, width=1.0, bottom=bottom, align="edge", label=m)
        bottom += n
    ax.set_ylabel("requests / h")
    ax.legend(loc="upper right", fontsize=8, ncol=3)
    ax.set_title(title)
    ax = axes[1]
    ax.step(hours, [order.index(r["point"]) for r in rows], where="post", color="k")
    ax.set_yticks(range(len(order)), order, fontsize=8)
    ax.set_ylabel("point")
    for r in rows:
        if r["hop"]:
            for a in axes:
                a.axvline(r["start_s"] / 3600.0, color="tab:red", lw=0.6, alpha=0.5)
    axes[2].step(hours, [r["warm_gpu_gib"] for r in rows], where="post", color="tab:green")
    held = out["static"].get(out["start_point"], {}).get("warm_gpu_gib")
    if held is not None:
        axes[2].axhline(held, color="gray", ls="--", lw=1, label="selected point held (mean)")
        axes[2].legend(loc="upper right", fontsize=8)
    axes[2].set_ylabel("warm GiB")
    axes[3].plot(hours, [r["switch_p95_s"] for r in rows], ".", color="tab:purple")
    axes[3].set_ylabel("switch P95 s")
    axes[3].set_xlabel("hour of the trace (red: hops)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


__all__ = ["check_plot_name", "draw_replay"]
