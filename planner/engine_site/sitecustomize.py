"""Start-up hook of the engine servers planner starts (their PYTHONPATH names this folder):
hides torchvision/torchaudio/torchcodec builds that cannot load (planner/torch_addons.py),
then runs the sitecustomize this one shadows, if any."""

import importlib.machinery
import importlib.util
import os
import sys

try:
    from planner.torch_addons import hide_unloadable

    hide_unloadable()
except ImportError:  # another interpreter without planner: nothing to hide from
    pass

_here = os.path.dirname(os.path.abspath(__file__))
_rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
