"""Issue 42 item 2: the engine owns its wake sequence per sleep level, and its post-wake check.

No GPU here, so vLLM's sleep mode is played by a fake server (engine_fakes.py) that behaves as vLLM does: after a
level-2 sleep it has dropped its weights, and `POST /wake_up` alone leaves it answering
garbage until `POST /collective_rpc {"method": "reload_weights"}` reads them again. The
runtime's wake (Controller over the local backend's HTTP calls) must reload before traffic.
"""

from __future__ import annotations

import json

import pytest
from engine_fakes import FakeVllm, SleepModeBackend, one_instance_plan

from planner.adjuster.backends.base import Handle
from planner.adjuster.control import Controller
from planner.adjuster.state import StateStore
from planner.engines.base import get_engine


def _answer(h: Handle) -> str:
    import urllib.request

    req = urllib.request.Request(
        f"http://{h.host}:{h.port}/v1/completions",
        data=b"{}",
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())["choices"][0]["text"]


@pytest.mark.parametrize(
    ("tier", "steps"),
    [
        ("disk", ["/sleep?level=2", "/wake_up", "/collective_rpc"]),
        ("host", ["/sleep?level=1", "/wake_up"]),
    ],
)
def test_a_wake_runs_the_engines_steps_for_its_sleep_level_before_traffic(tmp_path, tier, steps):
    """Before: the runtime posted `/wake_up` alone, so a disk-tier (level-2) wake served
    garbage (vLLM has dropped the weights) where the profiler's timed wake had reloaded them."""
    with FakeVllm() as srv, StateStore(tmp_path) as st:
        ctl = Controller(
            one_instance_plan(srv.server_address[1], tier, iid="d0"),
            None,
            SleepModeBackend(srv),
            st,
            model_path_resolver=lambda i: "/m",
        )
        h = ctl.wake("d0", 5)  # started
        assert _answer(h) == " Paris"
        srv.seen.clear()
        ctl.sleep("d0")
        h = ctl.wake("d0", 5)
        assert srv.seen == steps
        assert _answer(h) == " Paris"  # the first request after the wake
        assert st.get("d0").status == "awake"


def test_the_profiler_and_the_runtime_share_the_wake_steps():
    vllm = get_engine("vllm")
    assert vllm.wake_steps(1) == [("/wake_up", None)]
    assert vllm.wake_steps(2) == [("/wake_up", None), vllm.reload_request]
