"""`planner gateway`: the OpenAI-compatible proxy in front of an applied plan point."""

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


def open_gateway(
    plan_path: Path,
    *,
    point: str | None = None,
    state_dir: Path | None = None,
    backend: str | None = None,
    cluster: Path | None = None,
    models: Path | None = None,
    queue_limit: int = QUEUE_LIMIT,
    keys: Path | None = None,
    insecure: bool = False,
    access_log: Path | None = None,
):
    """The Gateway of a plan point over the real Controller (validates inputs: exit 2 on bad
    ones, the keys file included, before the state dir is touched)."""
    from planner.adjuster.apply import model_path_resolver
    from planner.adjuster.control import Controller
    from planner.adjuster.gateway import Gateway, GatewayConfig
    from planner.adjuster.gateway.auth import Auth
    from planner.adjuster.state import StateStore
    from planner.app.apply import load_plan_inputs
    from planner.app.apply_checks import placed
    from planner.cli.common import open_backend, state_backend
    from planner.errors import InputError
    from planner.io import sha256_file
    from planner.keys import install_secret, read_keys

    plan, cl, mods, models_file = load_plan_inputs(plan_path, cluster, models, point)
    if point is not None and point not in [p.name for p in plan.points]:
        raise InputError(
            f"no point {point!r} in the plan", file=str(plan_path), path="--point",
            fix=f"use one of {[p.name for p in plan.points]}",
        )  # fmt: skip
    if keys is not None:
        read_keys(keys, mods.names)
    plan, _ = placed(plan, cl, None, state_dir, str(plan_path))
    state = StateStore(state_dir)
    auth = Auth(install_secret(state.dir), keys, insecure=insecure, model_names=mods.names)
    control = Controller(
        plan, point, open_backend(state_backend(backend, state_dir), cl), state,
        model_path_resolver=model_path_resolver(mods, models_file.parent),
        plan_sha=sha256_file(plan_path),
    )  # fmt: skip
    return Gateway(
        control.point, control, state_dir=state.dir,
        config=GatewayConfig(queue_limit=queue_limit), auth=auth, access_log=access_log,
    )  # fmt: skip


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

        warning = check_bind(host, keys is not None, insecure_no_auth)  # exit 2: no side effect
        if warning:
            err_console.print(f"[bold red]{warning}[/]", highlight=False)
        gw = open_gateway(
            plan, point=point, state_dir=state_dir, backend=backend, cluster=cluster,
            models=models, queue_limit=queue_limit, keys=keys, insecure=insecure_no_auth,
            access_log=access_log,
        )  # fmt: skip
        if keys is not None and keys.stat().st_mode & 0o077:  # validated: it exists
            keys.chmod(0o600)
            err_console.print(f"note: {keys} was readable by others; now 0600", highlight=False)
        banner = (
            f"gateway for point {gw.point.name!r} ({len(gw.instances)} instances) on "
            f"http://{host}:{port} (auth: {gw.auth.mode}); request log {gw.log.path}"
            + (f"; access log {gw.access.path}" if gw.access is not None else "")
        )
        run_forever(gw, host, port, lambda: err_console.print(banner, highlight=False))
