"""Issue 42 item 1: the point in force in the state dir is the one desired state. The gateway's
controller follows an apply of another plan; an instance that apply stopped because its
point no longer has it is never started again, by a wake or by the health loop.

Fake engines (test_gateway_faults.EngineBackend: tiny HTTP servers) stand for vLLM here; the
vLLM-CPU case is test_operations_tour's second plan under traffic."""

from __future__ import annotations

import pytest
from gateway_fakes import EngineBackend, inst, post
from waits import wait_until

from planner.adjuster.apply import apply_point, down
from planner.adjuster.control import Controller
from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread
from planner.adjuster.state import StateStore
from planner.engines.process import free_port
from planner.errors import ApplyError
from planner.schemas.plan import Plan


def _plan(*instances) -> Plan:
    return Plan(
        selected="p", points=[{"name": "p", "instances": [i.model_dump() for i in instances]}]
    )


def _apply(plan: Plan, sha: str, be, st: StateStore):
    res = apply_point(
        plan,
        None,
        backend=be,
        state=st,
        plan_sha=sha,
        timeout_s=5,
        model_path_resolver=lambda i: f"/weights/{i.model}",
    )
    assert res.ok, res.error
    return res


def test_the_controller_follows_an_apply_of_another_plan(tmp_path):
    """Before: it followed only hops within the plan it was started with, so the gateway
    restarted `b0` (the issue's embed-0) after `apply` of a plan without it stopped it."""
    a0, b0 = inst("a0", "a", [0], "gpu"), inst("b0", "b", [1], "gpu")
    plan_a, plan_b = _plan(a0, b0), _plan(a0)  # both call their point `p`
    be, st = EngineBackend(), StateStore(tmp_path)
    try:
        _apply(plan_a, "sha-a", be, st)
        ctl = Controller(plan_a, None, be, st, model_path_resolver=lambda i: "/m", plan_sha="sha-a")
        _apply(plan_b, "sha-b", be, st)  # stops b0
        assert st.get("b0") is None
        assert [i.id for i in ctl.follow().instances] == ["a0"]
        for call in (ctl.restart, ctl.wake):
            with pytest.raises(ApplyError, match="not in the point in force"):
                call("b0", 5)
        assert st.get("b0") is None and len(be.engines) == 1
        assert ctl.resolve(a0) == "/weights/a"  # the model paths the apply recorded
    finally:
        be.close()
        st.close()


def test_a_running_gateway_follows_a_second_plan_and_never_restarts_what_it_removed(tmp_path):
    a0, b0 = inst("a0", "a", [0], "gpu"), inst("b0", "b", [1], "gpu")
    plan_a, plan_b = _plan(a0, b0), _plan(a0)
    be, st = EngineBackend(), StateStore(tmp_path)
    _apply(plan_a, "sha-a", be, st)
    ctl = Controller(plan_a, None, be, st, model_path_resolver=lambda i: "/m", plan_sha="sha-a")
    cfg = GatewayConfig(
        health_interval_s=0.05, adopt_every=1000, backoff_base_s=0.0, log_flush_s=0.05
    )
    gw = Gateway(plan_a.point(), ctl, state_dir=tmp_path, config=cfg)
    th = GatewayThread(gw, port=free_port()).start()
    try:
        assert post(th, model="b", prompt="x").status_code == 200
        _apply(plan_b, "sha-b", be, st)  # under the running gateway
        # the health loop finds b0 dead at once (its adoption round is far off): it follows
        # the point in force before any restart
        wait_until(lambda: "b0" not in gw.instances, "the gateway to follow the second plan")
        assert post(th, model="a", prompt="x").status_code == 200
        r = post(th, model="b", prompt="x")
        assert r.status_code == 404, r.text  # no such model in the point in force
        assert st.get("b0") is None and len(be.engines) == 1
        assert not [j for j in st.journal_entries() if j["action"] in ("restart", "wake")]
    finally:
        th.stop()
        down(st, be)
        be.close()
        st.close()


def test_previous_after_down_and_across_plans_from_the_kept_copy(tmp_path):
    """Issue 42 item 4. Before: `down` cleared the point in force, so `apply --previous`
    after it (and an apply of another plan) said no previous apply was recorded; nothing
    recorded which file (and which version of it) an apply used."""
    import yaml

    from planner.app.apply import remember as _remember
    from planner.app.history import previous_applied
    from planner.io import sha256_file

    a0, b0 = inst("a0", "a", [0], "gpu"), inst("b0", "b", [1], "gpu")
    d = tmp_path / "plans"
    d.mkdir()
    files = {}
    for name, plan in (("a", _plan(a0, b0)), ("b", _plan(a0))):
        doc = plan.model_dump(mode="json", exclude_none=True)
        doc["inputs"] = {"models": {"path": "models.yaml"}, "cluster": {"path": "cluster.yaml"}}
        files[name] = d / f"{name}.plan.yaml"
        files[name].write_text(yaml.safe_dump(doc))
    be, sd = EngineBackend(), tmp_path / "state"
    try:
        with StateStore(sd) as st:
            for name, plan in (("a", _plan(a0, b0)), ("b", _plan(a0))):
                before = st.meta()
                res = _apply(plan, sha256_file(files[name]), be, st)
                _remember(st, before, res, plan, files[name], None, None, None)
            down(st, be)
            sha_b = st.meta()["previous_plan_sha"]
            _apply(_plan(a0, b0), "sha-c", be, st)  # another plan after the down, not recorded
            journal = [j["detail"] for j in st.journal_entries() if j["action"] == "apply"]
        assert journal == [
            f"point p of {files[n]} (sha256 {sha256_file(files[n])[:12]})" for n in ("a", "b")
        ]
        prev = previous_applied(None, None, sd)  # what was in force before the down
        assert (prev.plan_path, prev.point, prev.sha) == (files["b"], "p", sha_b)
        assert prev.what == f"point p of {files['b']} (sha256 {sha_b[:12]})"
        files["b"].write_text(files["b"].read_text() + "# edited since\n")
        prev = previous_applied(None, None, sd)  # the file changed: the copy kept at apply
        assert prev.plan_path == sd / "plans" / f"{sha_b[:16]}.yaml"
        assert sha256_file(prev.plan_path) == sha_b and "from the copy" in prev.what
        assert prev.inputs == {"models": d / "models.yaml", "cluster": d / "cluster.yaml"}
        assert prev.plan_path.stat().st_mode & 0o777 == 0o600
    finally:
        be.close()
