"""`planner gateway`: the OpenAI-compatible proxy in front of an applied plan point."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import err_console, require_extra
from planner.optimizer.admission import QUEUE_LIMIT  # the one queue model (light import)


def open_gateway(
    plan_path: Path,
    *,
    point: str | None = None,
    state_dir: Path | None = None,
    backend: str = "local",
    cluster: Path | None = None,
    models: Path | None = None,
    queue_limit: int = QUEUE_LIMIT,
):
    """The Gateway of a plan point over the real Controller (validates inputs: exit 2 on bad ones)."""
    from planner.adjuster.apply import model_path_resolver
    from planner.adjuster.control import Controller
    from planner.adjuster.gateway import Gateway, GatewayConfig
    from planner.adjuster.state import StateStore
    from planner.cli.apply import _device, load_plan_inputs, make_backend
    from planner.errors import InputError
    from planner.io import sha256_file

    plan, cl, mods, models_file = load_plan_inputs(plan_path, cluster, models, point)
    if point is not None and point not in [p.name for p in plan.points]:
        raise InputError(
            f"no point {point!r} in the plan", file=str(plan_path), path="--point",
            fix=f"use one of {[p.name for p in plan.points]}",
        )  # fmt: skip
    state = StateStore(state_dir)
    control = Controller(
        plan, point, make_backend(backend, cl, _device(cl)), state,
        model_path_resolver=model_path_resolver(mods, models_file.parent),
        plan_sha=sha256_file(plan_path),
    )  # fmt: skip
    return Gateway(
        control.point, control, state_dir=state.dir, config=GatewayConfig(queue_limit=queue_limit)
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""

    @app.command()
    def gateway(
        plan: Annotated[Path, typer.Option("--plan", help="plan.yaml that was applied.")],
        point: Annotated[
            str | None, typer.Option("--point", help="Plan point (default: the selected one).")
        ] = None,
        host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
        state_dir: Annotated[
            Path | None,
            typer.Option(
                "--state-dir", help="State dir of `planner apply`; holds requests.sqlite."
            ),
        ] = None,
        backend: Annotated[
            str, typer.Option("--backend", help="local | ray (as given to `planner apply`).")
        ] = "local",
        cluster: Annotated[
            Path | None,
            typer.Option("--cluster", help="cluster.yaml; default: plan.inputs.cluster."),
        ] = None,
        models: Annotated[
            Path | None, typer.Option("--models", help="models.yaml; default: plan.inputs.models.")
        ] = None,
        queue_limit: Annotated[
            int, typer.Option("--queue-limit", min=1, help="Requests queued per waking model.")
        ] = QUEUE_LIMIT,
    ) -> None:
        """Serve /v1/models, /v1/completions, /v1/chat/completions, /health and /metrics.

        Routes by `model` to the least busy awake instance, wakes sleeping models on demand
        (sleeping their GPU co-tenants first) and logs every request to
        <state-dir>/requests.sqlite (a trace `planner workload` reads). SIGTERM or Ctrl-C:
        stop accepting, finish in-flight requests, exit.
        """
        require_extra("http", "`planner gateway`", ("aiohttp",))
        from planner.adjuster.gateway import run_forever

        gw = open_gateway(
            plan, point=point, state_dir=state_dir, backend=backend, cluster=cluster,
            models=models, queue_limit=queue_limit,
        )  # fmt: skip
        err_console.print(
            f"gateway for point {gw.point.name!r} ({len(gw.instances)} instances) on "
            f"http://{host}:{port}; request log {gw.log.path}",
            highlight=False,
        )
        run_forever(gw, host, port)
