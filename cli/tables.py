"""Rich tables for every command: numbers without exponents, one attainment format, and
tables that fit the terminal by leaving out their least important columns (never `swit…`).

In a pipe or a file the console is wide (cli/common.py), so nothing is left out there unless
COLUMNS asks for a width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from planner.optimizer.admission import REFUSED_QUEUE_FULL

# a table's rows: (cells, rich style or None)
Rows = Sequence[tuple[list[str], str | None]]


@dataclass(frozen=True)
class Col:
    """One column: its header, alignment, and when it may be left out for width."""

    header: str
    justify: Literal["left", "right"] = "right"
    drop: int = 0  # 0: always shown; else left out, highest first, when the table is too wide


def fit_table(
    title: str | None,
    cols: list[Col],
    rows: Rows,
    *,
    caption: str = "",
    console: Console | None = None,
    width: int | None = None,
) -> Table:
    """A table of `rows` ((cells, style) pairs) that fits `width` (default: the console's).

    Cells are never cut: columns with `drop > 0` are left out, highest `drop` first, until
    the table fits with its text columns wrapped at no less than TEXT_MIN characters; the
    caption names what was left out.
    """
    if console is None:
        from planner.cli.common import console as default_console

        console = default_console
    width = width or console.width
    keep = list(range(len(cols)))
    wide = console.options.update(max_width=10_000)
    while True:
        t = _build(title, [cols[i] for i in keep], [([r[i] for i in keep], s) for r, s in rows])
        droppable = [i for i in keep if cols[i].drop > 0]
        need = max(console.measure(t, options=wide).minimum, _needed(cols, keep, rows))
        if need <= width or not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (cols[i].drop, i)))
    left_out = [c.header for i, c in enumerate(cols) if i not in keep]
    lines = [caption] if caption else []
    if left_out:
        lines.append(f"left out at {width} columns: {', '.join(left_out)} (widen or use --json)")
    t.caption = "\n".join(lines) or None
    return t


TEXT_MIN = 24  # a text column narrower than this reads badly: leave out a number instead


def _needed(cols: list[Col], keep: list[int], rows: Rows) -> int:
    """The narrowest the table renders without cutting a cell: numbers (and their headers)
    never wrap, text columns wrap down to TEXT_MIN (or their longest cell), plus the borders.
    rich's own minimum can be narrower than what it then draws (it crops the rest)."""
    total = 1
    for i in keep:
        cells = [len(_plain(r[i])) for r, _ in rows]
        if cols[i].justify == "right":
            w = max([len(cols[i].header), *cells])
        else:
            w = min(max(cells, default=0), TEXT_MIN)
        total += w + 3  # one space each side and a border
    return total


def _build(title: str | None, cols: list[Col], rows: Rows) -> Table:
    t = Table(title=title)
    for k, c in enumerate(cols):
        if c.justify == "right":  # numbers never wrap
            t.add_column(c.header, justify="right", no_wrap=True)
        else:  # text wraps at spaces, never below TEXT_MIN (or its longest cell)
            longest = max((len(_plain(r[k])) for r, _ in rows), default=0)
            t.add_column(c.header, overflow="fold", min_width=min(longest, TEXT_MIN))
    for cells, style in rows:
        t.add_row(*cells, style=style)
    return t


def _plain(cell: str) -> str:
    from rich.text import Text

    return Text.from_markup(cell).plain


def fmt_attainment(x: float | None) -> str:
    """SLO attainment, the one format of every command: 98.6%."""
    if x is None or math.isnan(x):
        return "-"
    return f"{100 * x:.1f}%"


def fmt_num(x: float | None) -> str:
    """About three significant digits, never in exponent notation: 0.0187, 2.7, 22.1, 2100."""
    if x is None or math.isnan(x):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    a = abs(x)
    if a >= 100 or x == 0:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.{min(6, 2 - math.floor(math.log10(a)))}f}"


# How `evaluate` and `adjust --replay` score a point (docs/baselines.md): alike for a held point.
EVALUATE_SCORING = (
    "one simulation of the whole trace; `planner adjust --replay` gives the same figures for "
    "a point held all along (docs/baselines.md)"
)
REPLAY_SCORING = (
    "one continuous run per point in force, as `planner evaluate` simulates the whole trace: "
    "a point held all along has evaluate's figures; the adjusted series starts a fresh run at "
    "each hop and pays for it (requests wait while instances restart or wake)"
)

# Why the simulator counted a request unserved (SimResult.refused's keys), in words.
REFUSAL_REASONS = {
    "over_context": "prompt longer than max_model_len",
    REFUSED_QUEUE_FULL: "queue full",  # the gateway answers 503
    "no_instance": "no instance of its model",
}


def refusal_text(refused: dict[str, int] | None) -> str:
    """'12 refused (8 prompt longer than max_model_len, 4 queue full)'; '' for none."""
    parts = [f"{n} {REFUSAL_REASONS.get(k, k)}" for k, n in (refused or {}).items() if n]
    return f"{sum((refused or {}).values())} refused ({', '.join(parts)})" if parts else ""


def _refusal_lines(
    points: dict[str, dict[str, Any]],
    twins: dict[str, dict[str, Any]] | None,
    baselines: dict[str, dict[str, Any]] | None,
) -> list[str]:
    """One line per row whose requests were refused, with why."""
    named = [
        *points.items(),
        *((f"lru@{n}", m) for n, m in (twins or {}).items()),
        *((f"{n} (baseline)", m) for n, m in (baselines or {}).items()),
    ]
    return [f"{n}: {t}" for n, m in named if (t := refusal_text(m.get("refused")))]


_METRIC_COLS = [
    Col("point", "left"),
    Col("SLO met"),
    Col("TTFT s", drop=2),
    Col("TPOT ms", drop=3),
    Col("switch s"),
    Col("wakes", drop=4),
    Col("warm GiB"),
    Col("GPUs", drop=1),
]
_QUALITY_COL = Col("quality cost", drop=1)  # shown when a stand-in answered some request
_FITTED_COL = Col("SLO met (fitted)", drop=2)  # beside the held-back days' figure


def metrics_table(
    title: str,
    points: dict[str, dict[str, Any]],
    baselines: dict[str, dict[str, Any]] | None = None,
    *,
    selected: str | None = None,
    attainment: float | None = None,
    note: str = "",
    twins: dict[str, dict[str, Any]] | None = None,
    fitted: dict[str, dict[str, Any]] | None = None,
) -> Table:
    """One row per point, each followed by its `lru@` twin when given (then one per
    baseline): attainment, P95s, switches, warm GiB, GPUs, and the quality cost
    (`optimizer.quality`) when any row has one; with `fitted` (a point's figures on the fitted days), its
    attainment there beside the one on the days the rows are scored on.

    `note` goes under the table (e.g. how the rows were scored)."""
    errors = [f"n/a {n}: {m['error']}" for n, m in (baselines or {}).items() if "error" in m]
    every = [*points.values(), *(twins or {}).values(), *(baselines or {}).values()]
    quality = any(m.get("quality_cost", 0.0) > 0 for m in every)
    cols = [*_METRIC_COLS, _QUALITY_COL] if quality else list(_METRIC_COLS)
    if fitted:
        cols.insert(2, _FITTED_COL)
    caption = "P95 latencies; warm: time-average GiB kept on GPUs"
    if quality:
        caption += "; quality cost: quality penalty per request (variants and stand-ins)"
    if selected is not None:
        caption += "; * the selected point"
    rows: list[tuple[list[str], str | None]] = []

    def fitted_att(name: str) -> str:
        m = (fitted or {}).get(name.removesuffix(" *"))
        return fmt_attainment(m["slo_attainment"]) if m else ""

    def row(name: str, m: dict[str, Any], style: str | None = None) -> None:
        if "error" in m:
            rows.append(([name, "n/a", *[""] * (len(cols) - 2)], style))
            return
        att = m["slo_attainment"]
        below = attainment is not None and att < attainment
        rows.append(
            (
                [
                    name,
                    f"[red]{fmt_attainment(att)}[/]" if below else fmt_attainment(att),
                    *([fitted_att(name)] if fitted else []),
                    fmt_num(m["ttft_p95_s"]),
                    fmt_num(1000 * m["tpot_p95_s"]),
                    fmt_num(m["switch_p95_s"]),
                    str(m.get("switch_count", "")),
                    f"{m['warm_gpu_gib']:.1f}",
                    str(m.get("gpus_used", "")),
                    *([fmt_num(m.get("quality_cost", 0.0))] if quality else []),
                ],
                style,
            )
        )

    for name, m in points.items():
        row(f"{name} *" if name == selected else name, m)
        if twins and name in twins:
            row(f"  lru@{name}", twins[name], style="dim")
    for name, m in (baselines or {}).items():
        row(f"{name} (baseline)", m, style="dim")
    lines = [caption, *_refusal_lines(points, twins, baselines), *([note] if note else [])]
    lines += errors
    return fit_table(title, cols, rows, caption="\n".join(lines))
