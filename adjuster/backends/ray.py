"""The Ray backend: one node-agent actor per cluster node runs the local launcher there.

Each agent is a named, detached actor `planner-agent-<node>` in the Ray namespace `planner`,
pinned to its node by the custom resource `{"<node>": 0.001}` that the node's `ray start
--resources` declares (ENVIRONMENT.md). Detached, because `planner apply` exits after
starting the servers while the gateway and later applies reach the same agent by name; an
agent owns the engine processes it started (`planner.engine` runs them in their own process
group), so killing an agent does not stop them: `stop` them first (`RayBackend.shutdown`
does both). The agent is threaded (`max_concurrency`), so a slow `wait_ready` on one instance
does not block calls about another.

Errors cross the Ray boundary as plain data (the agent returns them; this side raises the
LaunchError/ApplyError), so the caller sees the same exceptions as with the local backend.
Ray is imported inside the functions: `planner --help` and the local backend never load it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from planner.adjuster.backends.base import Handle

from planner.errors import ApplyError, LaunchError
from planner.schemas.plan import Instance

NAMESPACE = "planner"
AGENT_PREFIX = "planner-agent-"
NODE_RESOURCE = 0.001  # share of the node's custom resource one agent holds


def agent_name(node: str) -> str:
    """The Ray actor name of a node's agent."""
    return f"{AGENT_PREFIX}{node}"


def _device() -> str:
    """`cuda` where this node has an NVIDIA device, else `cpu` (the CPU build of vLLM)."""
    return "cuda" if os.path.exists("/dev/nvidiactl") else "cpu"


class NodeAgent:
    """Lives on one node (as a Ray actor); starts, watches and stops its vLLM servers."""

    def __init__(self, node: str):
        import ray

        self.node = node
        self.host = ray.util.get_node_ip_address()
        self.device = _device()
        self.procs: dict[str, Any] = {}  # instance id -> Popen of a server this agent started

    def where(self) -> dict:
        """Node identity, for checks that the agent sits where it should."""
        import ray

        return {"node": self.node, "host": self.host, "ray_node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}  # fmt: skip

    def start(self, inst: dict, model_path: str, served_name: str, log_path: str) -> dict:
        from planner import engine

        spec = Instance.model_validate(inst)
        if not engine.is_port_free(spec.port, self.host):
            return {"error": "launch", "reason": "port_in_use", "message": f"port {spec.port} is taken on {self.node}"}  # fmt: skip
        argv, env = engine.build_argv(
            spec, model_path=model_path, served_name=served_name, device=self.device, host=self.host
        )
        proc = engine.start_server(argv, env, log_path)
        self.procs[spec.id] = proc
        return {"handle": Handle(spec.id, self.node, self.host, spec.port, pid=proc.pid, actor=agent_name(self.node), log_path=log_path)}  # fmt: skip

    def _proc(self, handle: Handle) -> Any:
        p = self.procs.get(handle.instance_id)
        return p if p is not None and p.pid == handle.pid else handle.pid

    def wait_ready(self, handle: Handle, timeout_s: float) -> dict:
        from planner import engine

        try:
            waited = engine.wait_ready(
                handle.host, handle.port, self._proc(handle), handle.log_path, timeout_s
            )
        except LaunchError as e:
            return {"error": "launch", "reason": e.reason, "message": e.message, "log_tail": e.log_tail, "fix": e.fix}  # fmt: skip
        return {"waited_s": waited}

    def stop(self, handle: Handle, timeout_s: float) -> dict:
        from planner import engine

        if handle.pid:
            engine.stop_server(self._proc(handle), timeout_s)
        self.procs.pop(handle.instance_id, None)
        return {}

    def stop_all(self, timeout_s: float = 30.0) -> list[str]:
        """Stop every server this agent started (before the agent itself is killed)."""
        from planner import engine

        ids = list(self.procs)
        for p in self.procs.values():
            engine.stop_server(p, timeout_s)
        self.procs.clear()
        return ids

    def is_alive(self, handle: Handle) -> bool:
        from planner import engine

        alive = engine.pid_alive(handle.pid) if handle.pid else True
        return alive and engine.http_ok(handle.host, handle.port, "/health")

    def post(self, handle: Handle, path: str) -> dict:
        from planner import engine

        try:
            return {"status": engine.http_post(handle.host, handle.port, path)}
        except OSError as e:
            return {"error": "apply", "message": f"POST {path} to {handle.instance_id}: {e}"}


class RayBackend:
    """Backend over a Ray cluster: each call goes to the agent of the instance's node."""

    name = "ray"

    def __init__(self, address: str | None = None, *, call_timeout_s: float = 60.0):
        self.address = address  # None: RAY_ADDRESS, else the local cluster ("auto")
        self.call_timeout_s = call_timeout_s
        self._agents: dict[str, Any] = {}

    def _ray(self) -> Any:
        import ray

        if not ray.is_initialized():
            ray.init(
                address=self.address or os.environ.get("RAY_ADDRESS") or "auto",
                namespace=NAMESPACE,
                log_to_driver=False,
                logging_level="ERROR",
            )
        return ray

    def agent(self, node: str) -> Any:
        """The node's agent actor, created (pinned to the node) on first use."""
        if node not in self._agents:
            ray = self._ray()
            res = ray.cluster_resources()
            if node not in res:
                raise ApplyError(
                    f"no Ray node offers the resource {node!r}",
                    fix=f"start that node with ray start --resources='{{\"{node}\": 1}}'",
                )
            actor = ray.remote(NodeAgent).options(
                name=agent_name(node),
                namespace=NAMESPACE,
                lifetime="detached",
                get_if_exists=True,
                resources={node: NODE_RESOURCE},
                num_cpus=0,
                max_concurrency=16,
            )
            self._agents[node] = actor.remote(node)
        return self._agents[node]

    def _get(self, ref: Any, timeout_s: float | None = None) -> Any:
        return self._ray().get(ref, timeout=timeout_s or self.call_timeout_s)

    @staticmethod
    def _raise(out: dict) -> dict:
        if out.get("error") == "launch":
            raise LaunchError(out["message"], reason=out["reason"], log_tail=out.get("log_tail", ""), fix=out.get("fix"))  # fmt: skip
        if out.get("error"):
            raise ApplyError(out["message"])
        return out

    def _agent_of(self, handle: Handle) -> Any:
        return self.agent(handle.node)

    def start(self, inst: Instance, *, model_path: str, served_name: str, log_path: str) -> Handle:
        ref = self.agent(inst.node).start.remote(
            inst.model_dump(), model_path, served_name, log_path
        )
        return self._raise(self._get(ref))["handle"]

    def wait_ready(self, handle: Handle, timeout_s: float) -> None:
        ref = self._agent_of(handle).wait_ready.remote(handle, timeout_s)
        self._raise(self._get(ref, timeout_s + self.call_timeout_s))

    def stop(self, handle: Handle, timeout_s: float = 30.0) -> None:
        ref = self._agent_of(handle).stop.remote(handle, timeout_s)
        self._get(ref, timeout_s + self.call_timeout_s)

    def is_alive(self, handle: Handle) -> bool:
        try:
            return bool(self._get(self._agent_of(handle).is_alive.remote(handle)))
        except Exception:  # agent or node gone: the process is unreachable either way
            return False

    def sleep(self, handle: Handle, level: int) -> None:
        self._post(handle, f"/sleep?level={level}")

    def wake(self, handle: Handle) -> None:
        self._post(handle, "/wake_up")

    def _post(self, handle: Handle, path: str) -> None:
        out = self._raise(self._get(self._agent_of(handle).post.remote(handle, path), 600.0))
        if out["status"] >= 400:
            raise ApplyError(
                f"POST {path} to {handle.instance_id} answered {out['status']}",
                fix="sleep mode needs the CUDA build of vLLM and --enable-sleep-mode",
            )

    def where(self, node: str) -> dict:
        """Where the node's agent runs (node name, address, Ray node id, pid)."""
        return self._get(self.agent(node).where.remote())

    def shutdown(self, nodes: list[str], timeout_s: float = 30.0) -> None:
        """Stop every server the agents of `nodes` started, then end the agents."""
        ray = self._ray()
        for node in nodes:
            try:
                actor = ray.get_actor(agent_name(node), namespace=NAMESPACE)
            except ValueError:
                continue
            deadline = time.monotonic() + timeout_s + self.call_timeout_s
            ray.get(actor.stop_all.remote(timeout_s), timeout=deadline - time.monotonic())
            ray.kill(actor)
            self._agents.pop(node, None)
