"""One serving rule: the gateway and the simulator's router make the same choices.

Each situation (the point's instances, which are awake, their requests in flight, the GPU
capacity the point gives, the stand-in rules, the model requested) goes to both: the
gateway's own choice (`Proxy.choose`, `Proxy.stand_in`, `Waker.plan`) and the router's
(`Router.route`, which performs the wake). Both must name the same instance to serve, to
wake and to put to sleep, and the same stand-in, and the expected ones. A second table does
the same for the plan's tiers over the day: wakes at the start of awake hours and sleeps
after the idle time (`Tiers.due_wakes` / `due_sleeps` against `Router`'s hours and idle
sleeps).
"""

from __future__ import annotations

import math

import pytest
from gateway_fakes import FakeControl

from planner.adjuster.backends.base import Handle
from planner.adjuster.gateway import Gateway
from planner.optimizer.sim.event import Timeline
from planner.optimizer.sim.router import Router, Slot
from planner.schemas.models import Substitute
from planner.schemas.plan import Instance, MemoryGib, Point, SubstituteRule

AWAKE_GIB = 2.0
ASLEEP_GIB = 0.5
WAKE_S = 1.0
HOUR_S = 3600.0


class _Engine:
    """What the router asks of an engine: requests in flight, when it is free."""

    def __init__(self, n: int, free_s: float = 0.0):
        self.n, self.free_s = n, free_s

    def outstanding(self, t_s: float) -> int:
        return self.n

    def drain(self) -> float:
        return self.free_s


def _row(i, m, g, tier, awake, n, **kw):
    """(id, model, gpus, tier, awake, in flight) and optionally hours, last_used_s, variant."""
    return {"id": i, "model": m, "gpus": g, "tier": tier, "awake": awake, "n": n, **kw}


def _rule(when, max_wait_s=None, wake=True, *to):
    return SubstituteRule(
        when=when,
        max_wait_s=max_wait_s,
        wake=wake,
        to=[Substitute(model=m, variant=v, quality_penalty=p) for m, v, p in to],
    )


R = _row
# name: (rows, requested model, GPU capacity GiB (None: not given), rules,
#        expected (served, woken, slept, stand-in penalty or None))
SITUATIONS = {
    "least loaded of two awake": (
        [R("a0", "a", [0], "gpu", True, 3), R("a1", "a", [1], "gpu", True, 1)],
        "a",
        None,
        {},
        ("a1", None, [], None),
    ),
    "ties go to plan order": (
        [R("a0", "a", [0], "gpu", True, 2), R("a1", "a", [1], "gpu", True, 2)],
        "a",
        None,
        {},
        ("a0", None, [], None),
    ),
    "without capacity a wake puts the awake lazy co-tenant to sleep": (
        [R("a0", "a", [0], "host", True, 0), R("b0", "b", [0], "host", False, 0)],
        "b",
        None,
        {},
        ("b0", "b0", ["a0"], None),
    ),
    "co-tenants that fit together stay awake": (
        [R("a0", "a", [0], "host", True, 0), R("b0", "b", [0], "host", False, 0)],
        "b",
        5.0,
        {},
        ("b0", "b0", [], None),
    ),
    "only what memory needs sleeps, outside its awake hours first": (
        [
            R("a0", "a", [0], "host", True, 0, hours=[0], last_used_s=1.0),
            R("c0", "c", [0], "host", True, 0, last_used_s=5.0),
            R("b0", "b", [0], "host", False, 0),
        ],
        "b",
        5.0,
        {},
        ("b0", "b0", ["c0"], None),
    ),
    "then the least recently used": (
        [
            R("a0", "a", [0], "host", True, 0, last_used_s=1.0),
            R("c0", "c", [0], "host", True, 0, last_used_s=5.0),
            R("b0", "b", [0], "host", False, 0),
        ],
        "b",
        5.0,
        {},
        ("b0", "b0", ["a0"], None),
    ),
    "wake the instance that displaces nobody": (
        [
            R("a0", "a", [0], "host", True, 0),
            R("b0", "b", [0], "host", False, 0),
            R("b1", "b", [1], "disk", False, 0),
        ],
        "b",
        None,
        {},
        ("b1", "b1", [], None),
    ),
    "then the one whose displaced co-tenants are idle": (
        [
            R("a0", "a", [0], "host", True, 2),
            R("c0", "c", [1], "host", True, 0),
            R("b0", "b", [0], "host", False, 0),
            R("b1", "b", [1], "host", False, 0),
        ],
        "b",
        None,
        {},
        ("b1", "b1", ["c0"], None),
    ),
    "a gpu-tier co-tenant is never put to sleep": (
        [R("g0", "g", [0], "gpu", True, 5), R("b0", "b", [0], "host", False, 0)],
        "b",
        None,
        {},
        ("b0", "b0", [], None),
    ),
    "a wake on two GPUs displaces the lazy co-tenants of both": (
        [
            R("a0", "a", [0], "host", True, 0),
            R("c0", "c", [1], "disk", True, 1),
            R("b0", "b", [0, 1], "host", False, 0),
            R("d0", "d", [2], "host", True, 0),
        ],
        "b",
        None,
        {},
        ("b0", "b0", ["a0", "c0"], None),
    ),
    "a gpu-tier instance coming back displaces nobody": (
        [R("g0", "g", [0], "gpu", False, 0), R("a0", "a", [0], "host", True, 2)],
        "g",
        None,
        {},
        ("g0", "g0", [], None),
    ),
    "an asleep instance of the model is not routed to": (
        [R("a0", "a", [0], "host", False, 0), R("a1", "a", [1], "host", True, 4)],
        "a",
        None,
        {},
        ("a1", None, [], None),
    ),
    "always while waking: the least loaded stand-in answers, the model wakes": (
        [
            R("a0", "a", [0], "host", False, 0),
            R("s0", "s", [1], "gpu", True, 3),
            R("t0", "t", [2], "gpu", True, 1),
        ],
        "a",
        None,
        {"a": _rule("always_while_waking", None, True, ("s", None, 0.1), ("t", None, 0.2))},
        ("t0", "a0", [], 0.2),
    ),
    "a stand-in that does not wake the model": (
        [R("a0", "a", [0], "host", False, 0), R("s0", "s", [1], "gpu", True, 0)],
        "a",
        None,
        {"a": _rule("always_while_waking", None, False, ("s", None, 0.1))},
        ("s0", None, [], 0.1),
    ),
    "a wake within the switch SLO is waited for": (
        [R("a0", "a", [0], "host", False, 0), R("s0", "s", [1], "gpu", True, 0)],
        "a",
        None,
        {"a": _rule("wake_exceeds_slo", 5.0, True, ("s", None, 0.1))},
        ("a0", "a0", [], None),
    ),
    "a wake beyond the switch SLO goes to the stand-in": (
        [R("a0", "a", [0], "host", False, 0), R("s0", "s", [1], "gpu", True, 0)],
        "a",
        None,
        {"a": _rule("wake_exceeds_slo", 0.5, True, ("s", None, 0.1))},
        ("s0", "a0", [], 0.1),
    ),
    "only the named variant stands in": (
        [
            R("a0", "a", [0], "host", False, 0),
            R("s0", "s", [1], "gpu", True, 0, variant="fp8"),
            R("s1", "s", [2], "gpu", True, 2, variant="awq"),
        ],
        "a",
        None,
        {"a": _rule("always_while_waking", None, True, ("s", "awq", 0.05))},
        ("s1", "a0", [], 0.05),
    ),
    "a stand-in the wake puts to sleep does not answer": (
        [R("a0", "a", [0], "host", False, 0), R("s0", "s", [0], "host", True, 0)],
        "a",
        None,
        {"a": _rule("always_while_waking", None, True, ("s", None, 0.1))},
        ("a0", "a0", ["s0"], None),
    ),
    "a co-tenant stand-in answers when the model does not wake": (
        [R("a0", "a", [0], "host", False, 0), R("s0", "s", [0], "host", True, 0)],
        "a",
        None,
        {"a": _rule("always_while_waking", None, False, ("s", None, 0.1))},
        ("s0", None, [], 0.1),
    ),
    "no stand-in awake: the request waits for the wake": (
        [R("a0", "a", [0], "host", False, 0), R("s0", "s", [1], "host", False, 0)],
        "a",
        None,
        {"a": _rule("always_while_waking", None, False, ("s", None, 0.1))},
        ("a0", "a0", [], None),
    ),
}


def _point(rows, capacity=None, rules=None, idle_sleep_s=None) -> Point:
    gpus = sorted({g for r in rows for g in r["gpus"]})
    return Point(
        name="p",
        instances=[
            Instance(
                id=r["id"],
                model=r["model"],
                variant=r.get("variant", "v"),
                node="n",
                gpus=r["gpus"],
                tp=len(r["gpus"]),
                tier=r["tier"],
                awake_hours=r.get("hours", []),
                memory_gib=MemoryGib(weights=1, kv=1, overhead=0, asleep=ASLEEP_GIB),
                port=9000 + k,
            )
            for k, r in enumerate(rows)
        ],
        gpu_usable_gib={"n": {g: capacity for g in gpus}} if capacity is not None else {},
        substitutes=rules or {},
        idle_sleep_s=idle_sleep_s,
    )


def _gateway(rows, tmp_path, now_s=10.0, **kw) -> Gateway:
    point = _point(rows, **kw)
    gw = Gateway(point, FakeControl(point, set()), state_dir=tmp_path, clock=lambda: now_s)
    for r in rows:
        inst = gw.pool.instances[r["id"]]
        inst.status = "awake" if r["awake"] else "asleep"
        inst.handle = Handle(r["id"], "n", "127.0.0.1", inst.spec.port) if r["awake"] else None
        inst.outstanding = r["n"]
        inst.last_used_s = r.get("last_used_s", -math.inf)
        inst.idle_since_s = r.get("idle_since_s", -math.inf)
        gw.waker.wake_s[r["model"]] = WAKE_S  # the wake time the router knows too
    return gw


def _gateway_choice(rows, model, capacity, rules, tmp_path):
    gw = _gateway(rows, tmp_path, capacity=capacity, rules=rules)
    served = gw.proxy.choose(model)
    if served is not None:
        return served.spec.id, None, [], None
    target, victims = gw.waker.plan(model)
    got = gw.proxy.stand_in(model)
    if got is not None:
        woken = target.spec.id if rules[model].wake else None
        return got[0].spec.id, woken, [v.spec.id for v in victims] if woken else [], got[1]
    return target.spec.id, target.spec.id, [v.spec.id for v in victims], None


def _router(rows, capacity=None, rules=None, idle_s=None, t0=0.0, handoff=None):
    models = sorted({r["model"] for r in rows})
    slots = [
        Slot(
            index=k,
            id=r["id"],
            model=models.index(r["model"]),
            tier=r["tier"],
            gpus=tuple(("n", x) for x in r["gpus"]),
            awake_gib=AWAKE_GIB,
            context_gib=ASLEEP_GIB,
            wake_s=WAKE_S,
            sleep_s=0.0,
            engine_delay_s=0.0,
            engine=_Engine(r["n"], r.get("idle_since_s", t0)),
            awake=r["awake"],
            ready_s=r.get("idle_since_s", -math.inf),
            last_used_s=r.get("last_used_s", -math.inf),
            hours=frozenset(r.get("hours", [])),
            variant=r.get("variant", "v"),
        )
        for k, r in enumerate(rows)
    ]
    by_model: dict[int, list[int]] = {}
    for s in slots:
        by_model.setdefault(s.model, []).append(s.index)
    subs = {}
    for name, rule in (rules or {}).items():
        cands = [
            (s, sub.quality_penalty)
            for sub in rule.to
            for s in slots
            if models[s.model] == sub.model and sub.variant in (None, s.variant)
        ]
        subs[models.index(name)] = (rule, cands)
    cap = {("n", g): capacity for r in rows for g in r["gpus"]} if capacity is not None else None
    router = Router(
        slots,
        by_model,
        Timeline(start_s=t0),
        gpu_memory_gib=cap,
        idle_timeout_s=idle_s,
        substitutes=subs,
        handoff=handoff,
    )
    for s in slots:  # the situation's awake instances hold their memory from the start
        if s.awake:
            router.timeline.awake_from(s.index, t0, counted=False)
    return router, models, slots


def _router_choice(rows, model, capacity, rules):
    router, models, slots = _router(rows, capacity, rules)
    before = {s.id: s.awake for s in slots}
    k, _, penalty = router.route(models.index(model), 10.0)
    woken = [s.id for s in slots if s.awake and not before[s.id]]
    slept = [s.id for s in slots if before[s.id] and not s.awake]
    return slots[k].id, (woken[0] if woken else None), slept, (penalty if penalty >= 0 else None)


@pytest.mark.parametrize("name", list(SITUATIONS))
def test_gateway_and_simulator_choose_alike(name, tmp_path):
    rows, model, capacity, rules, expected = SITUATIONS[name]
    assert _gateway_choice(rows, model, capacity, rules, tmp_path) == expected
    assert _router_choice(rows, model, capacity, rules) == expected


H9 = 9 * HOUR_S  # 09:00 of the first day
# name: (rows, now s, GPU capacity, idle_sleep_s, expected (woken ahead, put to sleep))
DAY = {
    "an instance wakes at the start of its awake hours": (
        [R("a0", "a", [0], "host", False, 0, hours=[9, 10])],
        H9,
        None,
        None,
        (["a0"], []),
    ),
    "not outside them": (
        [R("a0", "a", [0], "host", False, 0, hours=[10])],
        H9,
        None,
        None,
        ([], []),
    ),
    "nor when it would displace a co-tenant within its own hours": (
        [
            R("a0", "a", [0], "host", False, 0, hours=[9]),
            R("b0", "b", [0], "host", True, 0, hours=[9]),
        ],
        H9,
        None,
        None,
        ([], []),
    ),
    "nor one serving requests": (
        [R("a0", "a", [0], "host", False, 0, hours=[9]), R("b0", "b", [0], "host", True, 2)],
        H9,
        None,
        None,
        ([], []),
    ),
    "it displaces an idle one outside its hours": (
        [
            R("a0", "a", [0], "host", False, 0, hours=[9]),
            R("b0", "b", [0], "host", True, 0, idle_since_s=H9 - 60),
        ],
        H9,
        None,
        None,
        (["a0"], ["b0"]),
    ),
    "beside a co-tenant where both fit": (
        [
            R("a0", "a", [0], "host", False, 0, hours=[9]),
            R("b0", "b", [0], "host", True, 0, hours=[9], idle_since_s=H9 - 60),
        ],
        H9,
        5.0,
        None,
        (["a0"], []),
    ),
    "an idle instance sleeps after the idle time outside its hours": (
        [R("a0", "a", [0], "host", True, 0, hours=[8], idle_since_s=H9 + 100)],
        H9 + 1000,
        None,
        600.0,
        ([], ["a0"]),
    ),
    "not before it": (
        [R("a0", "a", [0], "host", True, 0, hours=[8], idle_since_s=H9 + 100)],
        H9 + 500,
        None,
        600.0,
        ([], []),
    ),
    "nor within its awake hours": (
        [R("a0", "a", [0], "host", True, 0, hours=[9], idle_since_s=H9 + 100)],
        H9 + 1000,
        None,
        600.0,
        ([], []),
    ),
    "a gpu-tier instance never sleeps": (
        [R("g0", "g", [0], "gpu", True, 0, idle_since_s=H9 + 100)],
        H9 + 1000,
        None,
        600.0,
        ([], []),
    ),
}


def _gateway_day(rows, now_s, capacity, idle_s, tmp_path):
    gw = _gateway(rows, tmp_path, now_s=now_s, capacity=capacity, idle_sleep_s=idle_s)
    woken = [i.spec.id for i in gw.tiers.due_wakes(now_s)]
    victims = [v.spec.id for i in gw.tiers.due_wakes(now_s) for v in gw.waker.displaces(i)]
    slept = [i.spec.id for i in gw.tiers.due_sleeps(now_s)]
    return woken, sorted(victims + slept)


def _router_day(rows, now_s, capacity, idle_s):
    router, _, slots = _router(rows, capacity, None, idle_s, t0=now_s - 2 * HOUR_S)
    router.scheduled = [s for s in slots if s.hours]
    router.next_hour_s = math.floor(now_s / HOUR_S) * HOUR_S  # the hour start just passed
    before = {s.id: s.awake for s in slots}
    router.settle_until(now_s + 1e-6)
    woken = [s.id for s in slots if s.awake and not before[s.id]]
    slept = [s.id for s in slots if before[s.id] and not s.awake]
    return woken, slept


@pytest.mark.parametrize("name", list(DAY))
def test_gateway_and_simulator_keep_the_same_hours(name, tmp_path):
    rows, now_s, capacity, idle_s, expected = DAY[name]
    assert _gateway_day(rows, now_s, capacity, idle_s, tmp_path) == expected
    assert _router_day(rows, now_s, capacity, idle_s) == expected


# name: (rows, point's handoff, requested model, GPU capacity GiB (None: not given),
#        expected woken ahead by the hand-off)
HANDOFF = {
    "a request wakes the model that often follows it": (
        [R("a0", "a", [0], "host", True, 0), R("b0", "b", [1], "host", False, 0)],
        {"a": ["b"]},
        "a",
        None,
        ["b0"],
    ),
    "beside a gpu-tier co-tenant too": (
        [
            R("a0", "a", [0], "host", True, 0),
            R("b0", "b", [1], "host", False, 0),
            R("g0", "g", [1], "gpu", True, 0),
        ],
        {"a": ["b"]},
        "a",
        None,
        ["b0"],
    ),
    "beside a host/disk co-tenant where the GPU holds both awake": (
        [
            R("a0", "a", [0], "host", True, 0),
            R("b0", "b", [1], "host", False, 0),
            R("c0", "c", [1], "host", False, 0),
        ],
        {"a": ["b"]},
        "a",
        2 * AWAKE_GIB,
        ["b0"],
    ),
    "not where the GPU cannot hold both awake": (
        [
            R("a0", "a", [0], "host", True, 0),
            R("b0", "b", [1], "host", False, 0),
            R("c0", "c", [1], "host", False, 0),
        ],
        {"a": ["b"]},
        "a",
        2 * AWAKE_GIB - 0.1,
        [],
    ),
    "nor where the point gives that GPU no capacity": (
        [
            R("a0", "a", [0], "host", True, 0),
            R("b0", "b", [1], "host", False, 0),
            R("c0", "c", [1], "host", False, 0),
        ],
        {"a": ["b"]},
        "a",
        None,
        [],
    ),
    "nor when the model has an instance awake": (
        [
            R("a0", "a", [0], "host", True, 0),
            R("b0", "b", [1], "host", False, 0),
            R("b1", "b", [2], "host", True, 0),
        ],
        {"a": ["b"]},
        "a",
        None,
        [],
    ),
    "nor for a model the request's does not hand off to": (
        [
            R("a0", "a", [0], "host", True, 0),
            R("b0", "b", [1], "host", False, 0),
            R("c0", "c", [2], "host", True, 0),
        ],
        {"a": ["b"]},
        "c",
        None,
        [],
    ),
}


def _gateway_handoff(rows, handoff, model, capacity, tmp_path):
    gw = _gateway(rows, tmp_path, capacity=capacity)
    gw.point.handoff = handoff
    woken: list[str] = []
    gw.waker.start_wake = lambda m, target=None: woken.append(target.spec.id)
    gw.tiers.hand_off(model)
    return woken


def _router_handoff(rows, handoff, model, capacity):
    models = sorted({r["model"] for r in rows})
    wakes = {models.index(a): [models.index(b) for b in bs] for a, bs in handoff.items()}
    router, models, slots = _router(rows, capacity, handoff=wakes)
    before = {s.id: s.awake for s in slots}
    k, _, _ = router.route(models.index(model), 10.0)
    return [s.id for s in slots if s.awake and not before[s.id] and s.index != k]


@pytest.mark.parametrize("name", list(HANDOFF))
def test_gateway_and_simulator_hand_off_alike(name, tmp_path):
    rows, handoff, model, capacity, expected = HANDOFF[name]
    assert _gateway_handoff(rows, handoff, model, capacity, tmp_path) == expected
    assert _router_handoff(rows, handoff, model, capacity) == expected
