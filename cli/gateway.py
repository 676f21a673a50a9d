"""`planner gateway`: the OpenAI-compatible proxy in front of an applied plan point."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import err_console


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
            typer.Option("--state-dir", help="State dir of `planner apply` (request log too)."),
        ] = None,
        backend: Annotated[
            str, typer.Option("--backend", help="local | ray (as given to `planner apply`).")
        ] = "local",
        queue_limit: Annotated[
            int, typer.Option("--queue-limit", min=1, help="Requests queued per waking model.")
        ] = 64,
    ) -> None:
        """Serve /v1/models, /v1/completions, /v1/chat/completions, /health and /metrics;
        wake sleeping models on demand and log every request to <state-dir>/requests.sqlite.
        SIGTERM or Ctrl-C: stop accepting, finish in-flight requests, exit."""
        from planner.adjuster.gateway import GatewayConfig, open_gateway, run_forever

        gw = open_gateway(
            plan, point=point, state_dir=state_dir, backend=backend,
            config=GatewayConfig(queue_limit=queue_limit),
        )  # fmt: skip
        err_console.print(
            f"gateway for point {gw.point.name!r} ({len(gw.instances)} instances) on "
            f"http://{host}:{port}; request log {gw.log.path}",
            highlight=False,
        )
        run_forever(gw, host, port)
