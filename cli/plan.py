"""`planner plan show PLAN`: what a plan point puts on each GPU, as a table (or --json)
(`planner.app.plan_show`; cli/plan_show.py prints it)."""

from __future__ import annotations

from typing import Annotated

import typer

from planner.cli.common import JsonOpt, PlanArg, PointOpt, print_json

plan_app = typer.Typer(help="Read plan files.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add `plan show`."""
    app.add_typer(plan_app, name="plan")


@plan_app.command("show")
def show_cmd(
    plan_path: PlanArg,
    point: PointOpt = None,
    hour: Annotated[
        int | None,
        typer.Option("--hour", min=0, max=23, help="Draw the memory planned at this UTC hour."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Memory per GPU of a plan point: weights, KV cache, sleeping instances, who is there,
    and the memory over the day (peak and when, awake hours, the idle-sleep rule)."""
    from planner.app.plan_show import show
    from planner.cli.plan_show import print_ladder, print_point

    view = show(plan_path, point, hour)
    if json_out:
        print_json(view.to_json())
        return
    print_point(view)
    print_ladder(view)
