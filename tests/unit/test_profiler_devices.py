"""Device discovery: NVML names -> catalog types, NVML reading (fake module), `planner init` files."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.profiler.devices import (
    GpuInfo,
    NodeInfo,
    discover_gpus,
    fs_type,
    gpu_type_from_name,
    interconnect_of,
)

NAMES = [
    ("NVIDIA GeForce RTX 4090", None, "RTX-4090"),
    ("NVIDIA GeForce RTX 3090", None, "RTX-3090"),
    ("NVIDIA GeForce RTX 3090 Ti", None, None),
    ("NVIDIA GeForce RTX 4090 D", None, None),
    ("NVIDIA H200", 140.4, "H200-SXM"),
    ("NVIDIA H200 NVL", 140.4, "H200-NVL"),
    ("NVIDIA H100 80GB HBM3", 79.6, "H100-SXM"),
    ("NVIDIA H100 PCIe", 79.6, "H100-PCIe"),
    ("NVIDIA H100 NVL", 93.6, None),
    ("NVIDIA A100-SXM4-80GB", 80.0, "A100-80GB-SXM"),
    ("NVIDIA A100-SXM4-40GB", 40.0, "A100-40GB"),
    ("NVIDIA A100-PCIE-40GB", 40.0, "A100-40GB"),
    ("NVIDIA A100 80GB PCIe", 80.0, "A100-80GB-PCIe"),
    ("NVIDIA A100-PCIE", 80.0, "A100-80GB-PCIe"),
    ("NVIDIA A10", 22.5, "A10"),
    ("NVIDIA A10G", 22.5, "A10G"),
    ("NVIDIA L4", 22.5, "L4"),
    ("NVIDIA L40S", 45.0, "L40S"),
    ("NVIDIA L40", 45.0, None),
    ("Tesla T4", 15.0, None),
]


@pytest.mark.parametrize(("name", "mem", "want"), NAMES)
def test_gpu_type_from_name(name, mem, want):
    assert gpu_type_from_name(name, mem) == want


class FakeNvml:
    """A pynvml stand-in: two H200s, the first with 18 NVLinks up, the second with none."""

    NVML_NVLINK_MAX_LINKS = 18

    class NotSupported(Exception):
        pass

    def __init__(self, fail_init=False):
        self.fail_init = fail_init
        self.shut = False

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlSystemGetDriverVersion(self):
        return b"570.124.06"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12080

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=int(140.4 * 1024**3))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        if h == 1:
            raise self.NotSupported()
        return 5

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 4

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetNvLinkState(self, h, link):
        if h == 1:
            raise self.NotSupported()
        return 1

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"


def test_discover_gpus_with_fake_nvml():
    """NVML path with a fake module (no GPU here): names mapped, links counted, versions read."""
    nv = FakeNvml()
    gpus, driver, cuda = discover_gpus(nv)
    assert driver == "570.124.06"
    assert cuda == "12.8"
    assert [g.gpu_type for g in gpus] == ["H200-SXM", "H200-SXM"]
    assert gpus[0].nvlink_links == 18 and gpus[1].nvlink_links == 0
    assert gpus[0].pcie_gen == 5 and gpus[1].pcie_gen == 4  # falls back to the current gen
    assert gpus[0].pcie_width == 16
    assert gpus[0].memory_gib == pytest.approx(140.4)
    assert nv.shut
    assert interconnect_of(gpus) == "pcie"
    assert interconnect_of(gpus[:1]) == "nvlink"


def test_discover_gpus_without_driver_is_empty():
    assert discover_gpus(FakeNvml(fail_init=True)) == ([], "", "")


def test_fs_type_of_root():
    assert isinstance(fs_type("/"), str)


def _node(gpus):
    return NodeInfo(hostname="box.lan", cpu_count=8, ram_gib=251.5, disk_free_gib=900.0, gpus=gpus)


def test_init_files_cpu_node_validate(tmp_path):
    from planner.cli.init import write_inputs
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
    from planner.cli.init import cluster_doc
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
    from planner.cli.init import cluster_doc
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
    from planner.cli.init import write_inputs
    from planner.schemas import load

    gpus = [GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", gpu_type="RTX-4090", memory_gib=23.99)]
    write_inputs(tmp_path, _node(gpus), force=False)
    cl = load(tmp_path / "cluster.yaml", "cluster")
    assert cl.nodes[0].gpus[0].spec.name == "RTX-4090"
    models = load(tmp_path / "models.yaml", "models")
    assert models.models[0].arch.num_layers > 0
    load(tmp_path / "slo.yaml", "slo")
