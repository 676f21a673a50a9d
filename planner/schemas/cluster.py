"""cluster.yaml: nodes, their GPUs, RAM and disk."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from planner.catalog.gpus import GpuSpec, resolve_gpu
from planner.schemas.common import SafeName, Strict, duplicates


class GpuGroup(Strict):
    """`count` GPUs of one type on a node."""

    type: str | GpuSpec = Field(
        description="built-in catalog name (`planner catalog gpus`) or an inline spec"
    )
    count: int = Field(ge=1, le=64, description="number of GPUs of this type")
    ids: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        default=None, description="device indices on the node; default: consecutive"
    )
    interconnect: Literal["pcie", "nvlink"] = Field(
        default="pcie", description="how these GPUs talk to each other"
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str | GpuSpec) -> str | GpuSpec:
        if isinstance(v, str):
            resolve_gpu(v)  # raises with a did-you-mean
        return v

    @model_validator(mode="after")
    def _ids_match_count(self) -> GpuGroup:
        if self.ids is not None and len(self.ids) != self.count:
            raise ValueError(f"ids has {len(self.ids)} entries but count is {self.count}")
        return self

    @property
    def spec(self) -> GpuSpec:
        """The resolved GPU spec."""
        return self.type if isinstance(self.type, GpuSpec) else resolve_gpu(self.type)


class PortRange(Strict):
    """The TCP ports a node's engine servers may listen on (`planner apply` places them)."""

    first: int = Field(ge=1024, le=65535, description="first engine port on the node")
    last: int = Field(default=65535, ge=1024, le=65535, description="last engine port")

    @model_validator(mode="after")
    def _ordered(self) -> PortRange:
        if self.last < self.first:
            raise ValueError(f"last ({self.last}) is below first ({self.first})")
        return self


class Node(Strict):
    """One server."""

    name: SafeName = Field(description="node name, unique in the cluster")
    address: str = Field(default="localhost", description="host for Ray/remote apply")
    cpu_memory_gib: float = Field(gt=0, le=65536, description="host RAM, GiB")
    disk_read_gbps: float | None = Field(
        default=None, gt=0, le=100, description="sequential disk read, GB/s; a profile overrides"
    )
    gpus: list[GpuGroup] = Field(default_factory=list, description="GPU groups on this node")
    ports: PortRange | None = Field(
        default=None,
        description="ports of its engine servers; default: those the plan gives (from 8100)",
    )

    @model_validator(mode="after")
    def _unique_ids(self) -> Node:
        dup = duplicates(self.device_ids())
        if dup:
            raise ValueError(f"GPU ids repeat on node {self.name!r}: {dup}")
        return self

    def device_ids(self) -> list[int]:
        """Device indices of all GPUs on this node, group by group."""
        out: list[int] = []
        nxt = 0
        for g in self.gpus:
            ids = g.ids if g.ids is not None else list(range(nxt, nxt + g.count))
            out.extend(ids)
            nxt = max(ids) + 1 if ids else nxt
        return out

    def gpu_list(self) -> list[tuple[int, GpuGroup]]:
        """(device index, group) for every GPU on the node."""
        out: list[tuple[int, GpuGroup]] = []
        ids = self.device_ids()
        k = 0
        for g in self.gpus:
            for _ in range(g.count):
                out.append((ids[k], g))
                k += 1
        return out


class Cluster(Strict):
    """kind: cluster."""

    kind: Literal["cluster"] = "cluster"
    version: Literal[1] = 1
    name: str = Field(default="cluster", description="cluster name")
    nodes: list[Node] = Field(min_length=1, description="the servers")

    @model_validator(mode="after")
    def _unique_nodes(self) -> Cluster:
        dup = duplicates(n.name for n in self.nodes)
        if dup:
            raise ValueError(f"duplicate node names: {dup}")
        return self

    def node(self, name: str) -> Node:
        """The node called `name` (KeyError if absent)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @property
    def gpu_count(self) -> int:
        """All GPUs in the cluster."""
        return sum(g.count for n in self.nodes for g in n.gpus)
