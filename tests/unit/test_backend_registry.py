"""The backend registry (adjuster/backends/__init__.py): one module and one line a backend."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.adjuster import backends as reg
from planner.adjuster.backends import (
    BackendKind,
    backend_class,
    backend_kinds,
    cluster_device,
    gpu_capacity,
    make_backend,
)
from planner.adjuster.backends.base import BackendFeature, Handle
from planner.adjuster.backends.local import LocalBackend
from planner.adjuster.backends.ray import RayBackend
from planner.adjuster.backends.sim import SimBackend
from planner.schemas import load_cluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "plans" / "examples"


def test_each_kind_is_one_registry_line_and_one_module():
    src = Path(reg.__file__).read_text()
    for kind in backend_kinds():
        lines = [ln for ln in src.splitlines() if re.match(rf'\s+"{kind}": \(', ln)]
        assert len(lines) == 1, kind
        module = ROOT / "adjuster" / "backends" / f"{kind}.py"
        # annotated: the type checker checks the class against the BackendClass protocol
        assert re.search(r"^BACKEND: BackendClass = \w+$", module.read_text(), re.M), module
    assert [backend_class(k) for k in backend_kinds()] == [LocalBackend, RayBackend, SimBackend]


def test_command_line_offers_the_backends_that_run_engines():
    assert [k.value for k in BackendKind] == ["local", "ray"]
    assert BackendKind.LOCAL == "local"  # a str: the commands compare it as before


def test_unknown_kind_names_the_known_ones():
    with pytest.raises(ValueError, match="known: local, ray, sim"):
        make_backend("k8s")


def test_make_backend_builds_each_kind_with_its_features():
    local = make_backend("local", None, "cpu")
    assert isinstance(local, LocalBackend) and local.device == "cpu"
    assert local.features == {BackendFeature.PROCESSES} and not local.supports_sleep
    cuda = make_backend(BackendKind.LOCAL, None, "cuda")
    assert BackendFeature.SLEEP in cuda.features and cuda.supports_sleep
    ray = make_backend("ray")  # Ray itself is imported only on the first call to a node
    assert BackendFeature.MULTI_NODE in ray.features and ray.supports_sleep
    sim = make_backend("sim", None, "cpu")
    assert isinstance(sim, SimBackend) and not sim.supports_sleep
    assert BackendFeature.PROCESSES not in sim.features
    assert make_backend("sim").supports_sleep


def test_each_backend_says_whether_a_handle_names_a_process():
    bare = Handle("a-0", "n", "127.0.0.1", 8100)
    assert not make_backend("local", None, "cpu").has_process(bare)
    assert make_backend("local", None, "cpu").has_process(Handle("a-0", "n", "h", 1, pid=7))
    assert make_backend("ray").has_process(Handle("a-0", "n", "h", 1, actor="planner-agent-n"))
    assert not make_backend("ray").has_process(bare)
    sim = make_backend("sim")
    assert not sim.has_process(Handle("a-0", "n", "h", 1, pid=7))  # not one it started


def test_device_and_gpu_capacity_come_from_the_cluster_file():
    cpu = load_cluster(EXAMPLES / "cpu" / "cluster.yaml")
    edge = load_cluster(EXAMPLES / "edge6" / "cluster.yaml")
    assert cluster_device(cpu) == "cpu" and cluster_device(edge) is None
    assert cluster_device(None) is None and gpu_capacity(None) is None
    cap = gpu_capacity(edge)
    assert len(cap) == 7
    l4 = next(g for n in edge.nodes for _, g in n.gpu_list() if n.name == "node-a")
    assert cap[("node-a", 0)] == pytest.approx(l4.spec.memory_gib * 0.95)
