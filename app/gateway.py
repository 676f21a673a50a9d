"""The gateway service: the OpenAI-compatible proxy of a plan point over the same
controller `planner apply` runs, its inputs checked (the keys file included) before the
state dir is touched."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from planner.optimizer.admission import QUEUE_LIMIT  # the one queue model (light import)

if TYPE_CHECKING:
    from planner.adjuster.gateway import Gateway


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
) -> Gateway:
    """The Gateway of a plan point over the real Controller (validates inputs: exit 2 on bad
    ones, the keys file included, before the state dir is touched)."""
    from planner.adjuster.apply import model_path_resolver
    from planner.adjuster.control import Controller
    from planner.adjuster.gateway import Gateway, GatewayConfig
    from planner.adjuster.gateway.auth import Auth
    from planner.adjuster.state import StateStore
    from planner.app.apply import load_plan_inputs
    from planner.app.apply_checks import placed
    from planner.app.backends import open_backend, state_backend
    from planner.errors import InputError
    from planner.io import sha256_file
    from planner.keys import install_secret, read_keys

    plan, cl, mods, models_file = load_plan_inputs(plan_path, cluster, models, point)
    if point is not None and point not in [p.name for p in plan.points]:
        raise InputError(
            f"no point {point!r} in the plan",
            file=str(plan_path),
            path="--point",
            fix=f"use one of {[p.name for p in plan.points]}",
        )
    if keys is not None:
        read_keys(keys, mods.names)
    plan, _ = placed(plan, cl, None, state_dir, str(plan_path))
    state = StateStore(state_dir)
    auth = Auth(install_secret(state.dir), keys, insecure=insecure, model_names=mods.names)
    control = Controller(
        plan,
        point,
        open_backend(state_backend(backend, state_dir), cl),
        state,
        model_path_resolver=model_path_resolver(mods, models_file.parent),
        plan_sha=sha256_file(plan_path),
    )
    return Gateway(
        control.point,
        control,
        state_dir=state.dir,
        config=GatewayConfig(queue_limit=queue_limit),
        auth=auth,
        access_log=access_log,
    )
