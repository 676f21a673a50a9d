"""`reconcile.diff`: desired point vs observed instances -> ordered actions (pure)."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given
from hypothesis import strategies as st

from planner.adjuster.reconcile import Observed, diff, spec_sha
from planner.schemas.plan import Instance, Point

MEM = {"weights": 4.0, "kv": 4.0, "overhead": 1.0}


def inst(iid: str, gpus=(0,), tier="gpu", port=None, node="n", **kw) -> Instance:
    return Instance.model_validate(
        {
            "id": iid,
            "model": iid.split("-")[0],
            "variant": "bf16",
            "node": node,
            "gpus": list(gpus),
            "tp": len(gpus),
            "tier": tier,
            "memory_gib": MEM,
            "port": port or 8100 + abs(hash(iid)) % 800,
            **kw,
        }
    )


def running(i: Instance, status="awake") -> Observed:
    return Observed(
        status=status,
        node=i.node,
        gpus=list(i.gpus),
        port=i.port,
        tier=i.tier,
        spec_sha=spec_sha(i),
        memory_gib=i.memory_gib.total,
    )


def point(*insts: Instance) -> Point:
    return Point(name="p", instances=list(insts))


def kinds(actions) -> list[tuple[str, str]]:
    return [(a.kind, a.instance) for a in actions]


def test_nothing_to_do_when_converged() -> None:
    a, b = inst("a-0", port=8100), inst("b-0", gpus=(1,), tier="host", port=8101)
    assert diff(point(a, b), {"a-0": running(a), "b-0": running(b, "asleep")}) == []
    # an awake lazy instance is fine too (the gateway woke it)
    assert diff(point(a, b), {"a-0": running(a), "b-0": running(b)}) == []


def test_start_missing_and_restart_dead_or_changed() -> None:
    a = inst("a-0", port=8100)
    b = inst("b-0", gpus=(1,), port=8101)
    c = inst("c-0", gpus=(2,), port=8102)
    changed = c.model_copy(update={"port": 8109})
    acts = diff(point(a, b, changed), {"b-0": running(b, "failed"), "c-0": running(c)})
    assert kinds(acts) == [("start", "a-0"), ("restart", "b-0"), ("restart", "c-0")]
    assert acts[2].reason == "spec changed"


def test_make_before_break_on_other_gpus() -> None:
    old, new = inst("old-0", gpus=(0,), port=8100), inst("new-0", gpus=(1,), port=8101)
    assert kinds(diff(point(new), {"old-0": running(old)})) == [
        ("start", "new-0"),
        ("stop", "old-0"),
    ]


def test_stop_first_when_the_same_gpus_or_port_are_needed() -> None:
    old, new = inst("old-0", gpus=(0,), port=8100), inst("new-0", gpus=(0,), port=8101)
    assert kinds(diff(point(new), {"old-0": running(old)})) == [
        ("stop", "old-0"),
        ("start", "new-0"),
    ]
    same_port = inst("new-0", gpus=(1,), port=8100)
    assert kinds(diff(point(same_port), {"old-0": running(old)}))[0] == ("stop", "old-0")


def test_make_before_break_when_memory_allows() -> None:
    old, new = inst("old-0", gpus=(0,), port=8100), inst("new-0", gpus=(0,), port=8101)
    roomy = {("n", 0): 80.0}
    assert kinds(diff(point(new), {"old-0": running(old)}, gpu_capacity_gib=roomy)) == [
        ("start", "new-0"),
        ("stop", "old-0"),
    ]
    tight = {("n", 0): 12.0}
    assert kinds(diff(point(new), {"old-0": running(old)}, gpu_capacity_gib=tight))[0] == (
        "stop",
        "old-0",
    )


def test_lazy_cotenants_start_one_at_a_time_each_put_to_sleep() -> None:
    g = inst("g-0", gpus=(0,), port=8100)
    h1 = inst("h1-0", gpus=(1,), tier="host", port=8101)
    h2 = inst("h2-0", gpus=(1,), tier="disk", port=8102)
    acts = diff(point(g, h1, h2), {})
    assert kinds(acts) == [
        ("start", "g-0"),
        ("start", "h1-0"),
        ("sleep", "h1-0"),
        ("start", "h2-0"),
        ("sleep", "h2-0"),
    ]
    assert [a.level for a in acts if a.kind == "sleep"] == [1, 2]


def test_without_sleep_mode_lazy_instances_stay_stopped() -> None:
    h = inst("h-0", tier="host", port=8101)
    assert diff(point(h), {}, sleep_supported=False) == []
    assert diff(point(h), {"h-0": running(h, "failed")}, sleep_supported=False) == []


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from(["gpu", "host"]), st.booleans()),
        min_size=0,
        max_size=6,
        unique_by=lambda t: t,
    )
)
def test_diff_then_apply_converges(specs) -> None:
    """Whatever runs, applying the actions leaves nothing to do (idempotence)."""
    insts = [inst(f"m{k}-0", gpus=(g,), tier=t, port=8100 + k) for k, (g, t, _) in enumerate(specs)]
    actual = {i.id: running(i) for i, (_, _, up) in zip(insts, specs, strict=True) if up}
    stray = inst("stray-0", gpus=(0,), port=8999)
    actual["stray-0"] = running(stray)
    desired = point(*insts)
    for a in diff(desired, actual):
        i = next((x for x in insts if x.id == a.instance), None)
        if a.kind == "stop":
            actual.pop(a.instance)
        elif a.kind in ("start", "restart", "wake"):
            actual[a.instance] = running(i)
        elif a.kind == "sleep":
            actual[a.instance] = running(i, "asleep")
    assert diff(desired, actual) == []
    assert set(actual) == {i.id for i in insts}


def test_capacity_counts_the_starts_planned_before() -> None:
    old = inst("old-0", gpus=(0,), port=8100)
    n1, n2 = inst("n1-0", gpus=(0,), port=8101), inst("n2-0", gpus=(0,), port=8102)
    cap = {("n", 0): 20.0}  # 9 GiB each: old + one new fit, old + two new do not
    acts = diff(point(n1, n2), {"old-0": running(old)}, gpu_capacity_gib=cap)
    assert kinds(acts) == [("stop", "old-0"), ("start", "n1-0"), ("start", "n2-0")]


def test_awake_cotenant_sleeps_before_a_new_one_starts() -> None:
    h1 = inst("h1-0", gpus=(1,), tier="host", port=8101)
    h2 = inst("h2-0", gpus=(1,), tier="host", port=8102)
    acts = diff(point(h1, h2), {"h1-0": running(h1)})  # h1 awake (the gateway woke it)
    assert kinds(acts) == [("sleep", "h1-0"), ("start", "h2-0"), ("sleep", "h2-0")]


def test_a_tier_change_is_a_sleep_or_a_wake_not_a_restart() -> None:
    g = inst("a-0", gpus=(0,), port=8100)
    h = inst("b-0", gpus=(0,), tier="host", port=8101)
    a_host = g.model_copy(update={"tier": "host"})
    b_gpu = h.model_copy(update={"tier": "gpu"})
    assert spec_sha(g) == spec_sha(a_host)  # the same process serves both tiers
    noted = a_host.model_copy(update={"gpu_type": "L40S", "shares_gpu_with": ["b-0"]})
    assert spec_sha(noted) == spec_sha(g)  # what the plan file notes for readers: no restart
    actual = {"a-0": running(g), "b-0": running(h, "asleep")}
    acts = diff(point(a_host, b_gpu), actual)
    # a sleeps first: its memory goes to b's wake on the same GPU
    assert kinds(acts) == [("sleep", "a-0"), ("wake", "b-0")]
    assert acts[0].level == 1
    # without sleep mode (CPU) the awake one keeps running and the stopped one starts
    cpu = {"a-0": running(g)}
    assert kinds(diff(point(a_host, b_gpu), cpu, sleep_supported=False)) == [("start", "b-0")]


def test_other_awake_hours_are_no_restart() -> None:
    """Issue 41: the ladder's rungs differ in awake hours; the process is the same. Before,
    the hours were hashed as a flag and a hop between rungs restarted the instance. An
    instance without awake hours keeps the hash it had."""
    h = inst("b-0", gpus=(0,), tier="host", port=8101)
    day = h.model_copy(update={"awake_hours": [8, 9, 10]})
    assert spec_sha(day) == spec_sha(h)
    assert kinds(diff(point(day), {"b-0": running(h, "asleep")})) == []
    blob = json.dumps(
        h.model_dump(mode="json", exclude={"tier", "gpu_type", "shares_gpu_with"}),
        sort_keys=True,
        separators=(",", ":"),
    )
    assert spec_sha(h) == hashlib.sha256(blob.encode()).hexdigest()[:16]
