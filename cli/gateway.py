"""`planner gateway`: the OpenAI-compatible proxy in front of an applied plan point
(`planner.app.gateway`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import (
    BackendOpt,
    PlanClusterOpt,
    PlanModelsOpt,
    PointOpt,
    err_console,
    require_extra,
)
from planner.optimizer.admission import QUEUE_LIMIT  # the one queue model (light import)

KeysOpt = Annotated[
    Path | None,
    typer.Option(
        "--keys",
        help="keys.yaml (`planner keys add`): every request needs one of its keys; "
        "re-read on SIGHUP and when it changes.",
    ),
]
InsecureOpt = Annotated[
    bool,
    typer.Option(
        "--insecure-no-auth",
        help="Allow a non-loopback --host without --keys (anyone on the network can "
        "call every model).",
    ),
]
AccessLogOpt = Annotated[
    Path | None,
    typer.Option(
        "--access-log",
        help="Append one line per request to this file (0600): time, user, model, route, "
        "status, wake wait, latency, tokens; never keys or prompts.",
    ),
]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""

    @app.command()
    def gateway(
        plan: Annotated[Path, typer.Option("--plan", help="plan.yaml that was applied.")],
        point: PointOpt = None,
        host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
        state_dir: Annotated[
            Path | None,
            typer.Option(
                "--state-dir", help="State dir of `planner apply`; holds requests.sqlite."
            ),
        ] = None,
        backend: BackendOpt = None,
        cluster: PlanClusterOpt = None,
        models: PlanModelsOpt = None,
        queue_limit: Annotated[
            int, typer.Option("--queue-limit", min=1, help="Requests queued per waking model.")
        ] = QUEUE_LIMIT,
        keys: KeysOpt = None,
        insecure_no_auth: InsecureOpt = False,
        access_log: AccessLogOpt = None,
    ) -> None:
        """Serve the OpenAI API (chat, completions, responses, embeddings), /health, /metrics.

        Routes by `model` to the least busy awake instance, wakes sleeping models on demand
        (sleeping their GPU co-tenants first) and logs every request to
        <state-dir>/requests.sqlite (a trace `planner workload` reads). SIGTERM or Ctrl-C:
        stop accepting, finish in-flight requests, exit. Without --keys it listens on
        loopback only; with them, the key's name is the user in the log and /metrics.
        """
        require_extra("http", "`planner gateway`", ("aiohttp",))
        from planner.adjuster.gateway import run_forever
        from planner.adjuster.gateway.auth import check_bind
        from planner.app.gateway import open_gateway

        warning = check_bind(host, keys is not None, insecure_no_auth)  # exit 2: no side effect
        if warning:
            err_console.print(f"[bold red]{warning}[/]", highlight=False)
        gw = open_gateway(
            plan,
            point=point,
            state_dir=state_dir,
            backend=backend,
            cluster=cluster,
            models=models,
            queue_limit=queue_limit,
            keys=keys,
            insecure=insecure_no_auth,
            access_log=access_log,
        )
        if keys is not None and keys.stat().st_mode & 0o077:  # validated: it exists
            keys.chmod(0o600)
            err_console.print(f"note: {keys} was readable by others; now 0600", highlight=False)
        banner = (
            f"gateway for point {gw.point.name!r} ({len(gw.instances)} instances) on "
            f"http://{host}:{port} (auth: {gw.auth.mode}); request log {gw.log.path}"
            + (f"; access log {gw.access.path}" if gw.access is not None else "")
        )
        run_forever(gw, host, port, lambda: err_console.print(banner, highlight=False))
