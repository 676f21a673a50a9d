"""`planner apply`, `planner status`, `planner down` (`planner.app.apply`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.apply_show import show_apply, status_table
from planner.cli.common import (
    BackendOpt,
    JsonOpt,
    PlanClusterOpt,
    PlanModelsOpt,
    PointOpt,
    StateDirOpt,
    console,
    err_console,
    print_json,
)

PortBaseOpt = Annotated[
    int | None,
    typer.Option(
        "--port-base",
        min=1024,
        max=65535,
        help="First engine port (each node's ports keep their order); kept for the next "
        "apply, the gateway and adjust. Default: the cluster's `ports:`, else the plan's.",
    ),
]


def apply_cmd(
    plan_path: Annotated[
        Path | None,
        typer.Argument(metavar="PLAN", help="plan.yaml from `planner optimize`."),
    ] = None,
    point: PointOpt = None,
    backend: BackendOpt = None,
    state_dir: StateDirOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the actions, change nothing.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds to wait for each server to be ready.")
    ] = 300.0,
    cluster: PlanClusterOpt = None,
    models: PlanModelsOpt = None,
    wait_lock: Annotated[
        float, typer.Option("--wait-lock", min=0, help="Seconds to wait for another apply's lease.")
    ] = 0.0,
    node: Annotated[
        str | None,
        typer.Option(
            "--node", help="Apply only this node's instances (this host's share; local backend)."
        ),
    ] = None,
    port_base: PortBaseOpt = None,
    previous: Annotated[
        bool,
        typer.Option(
            "--previous",
            help="Go back to the plan and point in force before the last apply (rollback).",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Make the running vLLM instances match a plan point (start, stop, sleep, restart)."""
    from planner.app.apply import ApplyHooks, ApplyRequest, apply

    req = ApplyRequest(
        plan_path=plan_path,
        point=point,
        backend=backend,
        state_dir=state_dir,
        dry_run=dry_run,
        timeout_s=timeout,
        cluster=cluster,
        models=models,
        wait_lock_s=wait_lock,
        node=node,
        port_base=port_base,
        previous=previous,
    )
    if json_out or dry_run or not err_console.is_terminal:
        # no spinner: a line on stderr per step as it begins and ends (JSON stays on stdout)
        hooks = ApplyHooks(say=_say, progress=_progress_line)
    else:
        hooks = ApplyHooks(say=_say, busy=lambda title: err_console.status(title))
    result = apply(req, hooks)
    show_apply(result, json_out, dry_run)
    if result.error is not None:
        from planner.cli.common import print_error

        print_error(str(result.error))
        raise typer.Exit(result.error.exit_code)


def _say(line: str) -> None:
    err_console.print(line, highlight=False, markup=False)


def _progress_line(line: str) -> None:
    err_console.print(line, highlight=False, markup=False, soft_wrap=True)


def status_cmd(
    state_dir: StateDirOpt = None,
    backend: BackendOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Instances this state dir runs: tier, awake/asleep, health, port, uptime."""
    from planner.app.apply import status

    st = status(state_dir, backend)
    if json_out:
        print_json(st.to_json())
    else:
        status_table(st)
    if st.failed:  # a script or a health check sees it (`planner logs ID` says why)
        err_console.print(f"failed: {', '.join(st.failed)}", highlight=False, markup=False)
        raise typer.Exit(1)


def down_cmd(
    state_dir: StateDirOpt = None,
    backend: BackendOpt = None,
    wait_lock: Annotated[
        float, typer.Option("--wait-lock", min=0, help="Seconds to wait for another apply's lease.")
    ] = 0.0,
    json_out: JsonOpt = False,
) -> None:
    """Stop everything this state dir started."""
    from planner.app.apply import down

    done = down(state_dir, backend, wait_lock)
    if json_out:
        print_json({"actions": [a.__dict__ for a in done]})
    else:
        for a in done:
            console.print(f"stopped {a.instance} ({a.node})", highlight=False, markup=False)
        console.print(
            f"{len(done)} instance(s) stopped; the gateway starts nothing until the next "
            "`planner apply`"
        )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("apply")(apply_cmd)
    app.command("status")(status_cmd)
    app.command("down")(down_cmd)
