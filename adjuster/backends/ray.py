"""The Ray backend: one node-agent actor per cluster node runs the local launcher there.

Each agent is a named, detached actor `planner-agent-<node>` in the Ray namespace `planner`,
pinned to its node by the custom resource `{"<node>": 0.001}` that the node's `ray start
--resources` declares (docs/environment.md). Detached, because `planner apply` exits after
starting the servers while the gateway and later applies reach the same agent by name; an
agent owns the engine processes it started (`planner.engines.process` runs them in their own process
group), so killing an agent does not stop them: `stop` them first (`RayBackend.shutdown`
does both). The agent is threaded (`max_concurrency`), so a slow `wait_ready` on one instance
does not block calls about another.

Engines bind the node's loopback; where the node's address is not loopback, the agent's
relay (`relay.py`) is the only way in from other hosts: it listens on the node's address at
each engine's port and passes on only the planner's routes, with the engine's secret. The
handles it returns name the node's address, so callers reach an engine alike either way.

Errors cross the Ray boundary as plain data (the agent returns them; this side raises the
LaunchError/ApplyError), so the caller sees the same exceptions as with the local backend.
Ray is imported inside the functions: `planner --help` and the local backend never load it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, ClassVar

from planner.adjuster.backends.base import BackendClass, BackendFeature, Handle
from planner.adjuster.backends.relay import LOOPBACK, Relay, is_loopback
from planner.errors import ApplyError, LaunchError, PortHeldError
from planner.schemas.cluster import Cluster
from planner.schemas.plan import Instance

NAMESPACE = "planner"
AGENT_PREFIX = "planner-agent-"
NODE_RESOURCE = 0.001  # share of the node's custom resource one agent holds


def agent_name(node: str) -> str:
    """The Ray actor name of a node's agent."""
    return f"{AGENT_PREFIX}{node}"


def _err(e: Exception) -> dict:
    """An ApplyError/LaunchError as data that crosses the Ray boundary."""
    if isinstance(e, LaunchError):
        return {
            "error": "launch",
            "reason": e.reason,
            "message": e.message,
            "log_tail": e.log_tail,
            "fix": e.fix,
        }
    return {"error": "apply", "message": str(e)}


class NodeAgent:
    """Lives on one node (as a Ray actor) and runs a LocalBackend there."""

    def __init__(self, node: str, device: str | None = None):
        import ray

        from planner.adjuster.backends.local import LocalBackend

        self.node = node
        self.address = ray.util.get_node_ip_address()  # what other hosts reach this node at
        self.local = LocalBackend(device, host=LOOPBACK)  # type: ignore[arg-type]
        self.relay = None if is_loopback(self.address) else Relay(self.address)

    def _here(self, handle: Handle) -> Handle:
        """The handle as this node reaches the engine (loopback); its relay (re)opened, so
        an agent started again still lets the planner in."""
        if self.relay is not None:
            self.relay.open(handle.port, handle.secret)
        return dataclasses.replace(handle, host=LOOPBACK)

    def where(self) -> dict:
        """Node name, address, Ray node id, pid and device: to check the pinning."""
        import ray

        return {
            "node": self.node,
            "host": self.address,
            "device": self.local.device,
            "relay_ports": self.relay.ports() if self.relay is not None else None,
            "ray_node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
        }

    def start(self, inst: dict, model_path: str, served_name: str, log_path: str) -> dict:
        spec = Instance.model_validate(inst)
        try:
            h = self.local.start(
                spec, model_path=model_path, served_name=served_name, log_path=log_path
            )
        except LaunchError as e:  # its port is held on that node
            return _err(e)
        except (ApplyError, OSError) as e:
            return _err(ApplyError(f"start of {spec.id} on {self.node}: {e}"))
        try:
            self._here(h)
        except OSError as e:
            self.local.stop(h, 10.0)
            return _err(ApplyError(f"relay of {spec.id} on {self.address}:{spec.port}: {e}"))
        h.actor, h.host = agent_name(self.node), self.address
        h.ref = f"actor {h.actor} pid {h.pid}"
        return {"handle": h}

    def wait_ready(self, handle: Handle, timeout_s: float) -> dict:
        try:
            self.local.wait_ready(self._here(handle), timeout_s)
        except (ApplyError, OSError) as e:
            if isinstance(e, OSError):
                e = ApplyError(f"relay for {handle.instance_id} on {self.node}: {e}")
            return _err(e)
        return {}

    def stop(self, handle: Handle, timeout_s: float) -> dict:
        self.local.stop(dataclasses.replace(handle, host=LOOPBACK), timeout_s)
        if self.relay is not None:
            self.relay.close(handle.port)
        return {}

    def stop_all(self, timeout_s: float = 30.0) -> list[int]:
        """Stop every server this agent started (before the agent itself is killed)."""
        from planner.engines import process

        pids = list(self.local._procs)
        for pid in pids:
            process.stop_server(self.local._procs.pop(pid), timeout_s)
        if self.relay is not None:
            for port in self.relay.ports():
                self.relay.close(port)
        return pids

    def is_alive(self, handle: Handle) -> bool:
        try:
            return self.local.is_alive(self._here(handle))
        except OSError:  # the relay cannot listen: nobody outside reaches it
            return False

    def sleep(self, handle: Handle, level: int) -> dict:
        try:
            self.local.sleep(self._here(handle), level)
        except (ApplyError, OSError) as e:
            return _err(e if isinstance(e, ApplyError) else ApplyError(str(e)))
        return {}

    def wake(self, handle: Handle, level: int) -> dict:
        try:
            self.local.wake(self._here(handle), level)
        except (ApplyError, OSError) as e:
            return _err(e if isinstance(e, ApplyError) else ApplyError(str(e)))
        return {}

    def gpu_free_gib(self, gpus: list[int]) -> dict[int, float] | None:
        return self.local.gpu_free_gib(self.node, gpus)


class RayBackend:
    """Backend over a Ray cluster: each call goes to the agent of the instance's node."""

    name = "ray"
    extra: ClassVar[str | None] = "cluster"  # pip extra that brings Ray

    def __init__(
        self,
        address: str | None = None,
        *,
        device: str | None = None,
        call_timeout_s: float = 60.0,
    ):
        self.address = address  # None: RAY_ADDRESS, else the local cluster ("auto")
        self.device = device  # cuda | cpu for every node; None: each agent detects its own
        self.call_timeout_s = call_timeout_s
        self._agents: dict[str, Any] = {}

    @classmethod
    def from_cluster(
        cls, cluster: Cluster | None = None, *, device: str | None = None
    ) -> RayBackend:
        """What `planner apply --backend ray` builds: the cluster at RAY_ADDRESS (or local);
        `device` None: each agent detects its own node's."""
        return cls(device=device)

    @property
    def features(self) -> frozenset[BackendFeature]:
        """Every node; sleep mode needs CUDA (an unknown device: assume the nodes have it)."""
        out = {BackendFeature.PROCESSES, BackendFeature.MULTI_NODE, BackendFeature.GPU_MEMORY}
        if self.device != "cpu":
            out.add(BackendFeature.SLEEP)
        return frozenset(out)

    @property
    def supports_sleep(self) -> bool:
        """Whether `sleep`/`wake` keep the process."""
        return BackendFeature.SLEEP in self.features

    def has_process(self, handle: Handle) -> bool:
        """An actor (or a pid) recorded for the handle."""
        return handle.actor is not None or handle.pid is not None

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
            self._agents[node] = actor.remote(node, self.device)
        return self._agents[node]

    def _get(self, ref: Any, timeout_s: float | None = None) -> Any:
        return self._ray().get(ref, timeout=timeout_s or self.call_timeout_s)

    @staticmethod
    def _raise(out: dict) -> dict:
        if out.get("error") == "launch" and out["reason"] == "port_in_use":
            raise PortHeldError(
                out["message"],
                reason="port_in_use",
                log_tail=out.get("log_tail", ""),
                fix=out.get("fix"),
            )
        if out.get("error") == "launch":
            raise LaunchError(
                out["message"],
                reason=out["reason"],
                log_tail=out.get("log_tail", ""),
                fix=out.get("fix"),
            )
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
        self._raise(self._get(self._agent_of(handle).sleep.remote(handle, level), 600.0))

    def wake(self, handle: Handle, level: int) -> None:
        self._raise(self._get(self._agent_of(handle).wake.remote(handle, level), 600.0))

    def gpu_free_gib(self, node: str, gpus: list[int]) -> dict[int, float] | None:
        """Free memory of the GPUs of `node`, read by its agent (None without CUDA there)."""
        return self._get(self.agent(node).gpu_free_gib.remote(gpus))

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


BACKEND: BackendClass = RayBackend
