"""Rich tables shared by optimize, evaluate and adjust."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def metrics_table(
    title: str,
    points: dict[str, dict[str, Any]],
    baselines: dict[str, dict[str, Any]] | None = None,
    *,
    selected: str | None = None,
    attainment: float | None = None,
) -> Table:
    """One row per point (then per baseline): attainment, P95s, switches, warm GiB, GPUs."""
    errors = [f"{n}: {m['error']}" for n, m in (baselines or {}).items() if "error" in m]
    caption = "P95 latencies in s; warm: time-average GPU GiB"
    t = Table(title=title, caption="\n".join([caption, *(f"n/a {e}" for e in errors)]))
    t.add_column("point", no_wrap=True)
    # P95 latencies in s (TPOT in ms); warm: time-average GiB kept on GPUs
    for col in ("SLO met", "TTFT", "TPOT ms", "switch", "wakes", "warm", "GPUs"):
        t.add_column(col, justify="right")

    def row(name: str, m: dict[str, Any], style: str | None = None) -> None:
        if "error" in m:
            t.add_row(name, "n/a", *[""] * 6, style=style)
            return
        att = m["slo_attainment"]
        att_s = f"{att:.3f}" if attainment is None or att >= attainment else f"[red]{att:.3f}[/]"
        t.add_row(
            name,
            att_s,
            _num(m["ttft_p95_s"]),
            _num(1000 * m["tpot_p95_s"]),
            _num(m["switch_p95_s"]),
            str(m.get("switch_count", "")),
            f"{m['warm_gpu_gib']:.1f}",
            str(m.get("gpus_used", "")),
            style=style,
        )

    for name, m in points.items():
        row(f"{name} *" if name == selected else name, m)
    for name, m in (baselines or {}).items():
        row(f"{name} (baseline)", m, style="dim")
    return t


def _num(x: float) -> str:
    """Three significant digits, compact for large values (an overloaded baseline's seconds)."""
    return f"{x:.3g}" if x < 1000 else f"{x:.2g}"
