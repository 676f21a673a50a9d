"""RayBackend pieces that need no Ray: agent names, errors crossing the actor boundary."""

from __future__ import annotations

import pytest

from planner.adjuster.backends.ray import RayBackend, _err, agent_name
from planner.errors import ApplyError, LaunchError


def test_agent_name_and_device():
    assert agent_name("node-b") == "planner-agent-node-b"
    assert RayBackend.from_cluster(None, device="cpu").supports_sleep is False
    assert RayBackend(device="cuda").supports_sleep is True


def test_launch_errors_survive_the_round_trip():
    e = LaunchError(
        "exited", reason="port_in_use", log_tail="Address already in use", fix="free it"
    )
    with pytest.raises(LaunchError) as got:
        RayBackend._raise(_err(e))
    assert (got.value.reason, got.value.log_tail, got.value.fix) == (
        "port_in_use",
        "Address already in use",
        "free it",
    )
    with pytest.raises(ApplyError, match="no sleep mode"):
        RayBackend._raise(_err(ApplyError("no sleep mode")))
    assert RayBackend._raise({"waited_s": 1.0}) == {"waited_s": 1.0}


def test_importing_the_backend_does_not_import_ray():
    import subprocess
    import sys

    code = "import sys, planner.adjuster.backends.ray; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
