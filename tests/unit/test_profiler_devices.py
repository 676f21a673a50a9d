"""Node discovery (RAM, disk, file system) and the files `planner init` writes from it."""

from __future__ import annotations

import pytest

from planner.gpu_discovery import GpuInfo
from planner.profiler.devices import NodeInfo, fs_type


def test_fs_type_of_root():
    assert isinstance(fs_type("/"), str)


def _node(gpus):
    return NodeInfo(hostname="box.lan", cpu_count=8, ram_gib=251.5, disk_free_gib=900.0, gpus=gpus)


def test_init_files_cpu_node_validate(tmp_path):
    from planner.app.init import write_inputs
    from planner.schemas import load

    paths = write_inputs(tmp_path, _node([]), force=False)
    assert [p.name for p in paths] == ["cluster.yaml", "models.yaml", "slo.yaml"]
    cl = load(tmp_path / "cluster.yaml", "cluster")
    assert cl.nodes[0].gpus[0].spec.name == "cpu"
    assert cl.nodes[0].cpu_memory_gib == 251.5
    load(tmp_path / "models.yaml", "models")
    load(tmp_path / "slo.yaml", "slo")
    from planner.errors import InputError

    with pytest.raises(InputError):
        write_inputs(tmp_path, _node([]), force=False)  # no silent overwrite
    write_inputs(tmp_path, _node([]), force=True)


def test_init_cluster_from_detected_gpus():
    from planner.app.init import cluster_doc
    from planner.schemas import parse

    gpus = [
        GpuInfo(index=i, name="NVIDIA H200", gpu_type="H200-SXM", memory_gib=140.4, nvlink_links=18)
        for i in range(4)
    ]
    doc = cluster_doc(_node(gpus))
    g = doc["nodes"][0]["gpus"][0]
    assert g == {"type": "H200-SXM", "count": 4, "ids": [0, 1, 2, 3], "interconnect": "nvlink"}
    parse(doc, "cluster")


def test_init_unknown_gpu_asks_for_inline_spec():
    from planner.app.init import cluster_doc
    from planner.errors import InputError

    with pytest.raises(InputError, match="not in the catalog"):
        cluster_doc(_node([GpuInfo(index=0, name="Tesla T4", gpu_type=None, memory_gib=15.0)]))


def test_init_cli_writes_cpu_node(tmp_path, capsys):
    from planner.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["init", "-o", str(tmp_path)])
    assert e.value.code == 0
    assert (tmp_path / "cluster.yaml").read_text().startswith("#")


def test_init_files_gpu_node_validate(tmp_path):
    from planner.app.init import write_inputs
    from planner.schemas import load

    gpus = [GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", gpu_type="RTX-4090", memory_gib=23.99)]
    write_inputs(tmp_path, _node(gpus), force=False)
    cl = load(tmp_path / "cluster.yaml", "cluster")
    assert cl.nodes[0].gpus[0].spec.name == "RTX-4090"
    models = load(tmp_path / "models.yaml", "models")
    assert models.models[0].arch.num_layers > 0
    load(tmp_path / "slo.yaml", "slo")
