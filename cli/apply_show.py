"""What `planner apply` and `planner status` print: the actions (a table for a dry run, a
line each otherwise) and the instances a state dir runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.cli.common import console, print_json

if TYPE_CHECKING:
    from planner.adjuster.apply import ApplyResult
    from planner.app.apply import Status


def show_apply(result: ApplyResult, json_out: bool, dry_run: bool) -> None:
    """Print what an apply did (or would do)."""
    if json_out:
        print_json(result.to_json())
    elif dry_run:
        actions_table(result, f"planned actions for point {result.point}")
    else:
        for a in result.actions:
            console.print(
                f"{a.action:8} {a.instance:24} {a.node:12} {a.result:12} {a.detail}",
                highlight=False,
                markup=False,
            )
        if result.ok:
            console.print(f"point {result.point}: {len(result.actions)} action(s), up to date")


def actions_table(result: ApplyResult, title: str) -> None:
    from rich.table import Table
    from rich.text import Text  # details may hold brackets: no markup

    t = Table(title=title)
    for c in ("#", "action", "instance", "node", "result", "detail"):
        t.add_column(c)
    for k, a in enumerate(result.actions, 1):
        t.add_row(*(Text(x) for x in (str(k), a.action, a.instance, a.node, a.result, a.detail)))
    console.print(t)


def status_table(st: Status) -> None:
    """The human-readable `planner status`."""
    from planner.cli.tables import Col, fit_table

    # At 80 columns the least needed columns go first (pid, uptime, port, ...), never a cut
    # cell; the plan's path stands under the table, where it may wrap.
    cols = [
        Col("instance", "left"),
        Col("model", "left", drop=3),
        Col("node", "left"),
        Col("tier", "left"),
        Col("status", "left"),
        Col("health", "left", drop=1),
        Col("port", drop=2),
        Col("pid", drop=6),
        Col("uptime", drop=5),
        Col("restarts", drop=4),
    ]
    cells = []
    for x in st.instances:
        up = f"{x.uptime_s:.0f} s" if x.uptime_s is not None else "-"
        cells.append(
            (
                [
                    x.id,
                    x.model,
                    x.node,
                    x.tier,
                    x.status,
                    "ok" if x.healthy else "-",
                    str(x.port),
                    str(x.pid or "-"),
                    up,
                    str(x.restarts),
                ],
                None,
            )
        )
    plan = st.plan or "no plan applied"
    console.print(fit_table(f"point {st.point or '-'}", cols, cells, caption=f"plan: {plan}"))
