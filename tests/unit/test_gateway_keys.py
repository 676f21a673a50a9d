"""Gateway keys (issue 28): 401/403/429, identity by key, limits, reloads, the bind rule,
admin-only /metrics, and the `keys` input kind and CLI.

The gateway runs over gateway_fakes.py's fake engines (no vLLM); checks that need a real
process (SIGHUP) or a peer that is not loopback (a network namespace with its own address)
run tests/unit/gateway_proc.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from gateway_fakes import wait_rows
from gateway_proc import wait_health
from waits import budget_s

from planner.adjuster.gateway import GatewayConfig
from planner.engines.process import free_port, stop_server
from planner.keys import INSTALL_SECRET, add_key, hash_key, key_id, read_keys, remove_key

HERE = Path(__file__).resolve().parent
PROC = HERE / "gateway_proc.py"


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}  # (h1server.Headers: lower-case names)


def post(th, key=None, headers=None, **body):
    h = {**(bearer(key) if key else {}), **(headers or {})}
    return httpx.post(th.url + "/v1/completions", json=body, headers=h, timeout=30)


def in_flight(url: str, model: str, admin: str, timeout_s: float = 20.0) -> None:
    """Until the gateway holds a request of `model` (its /metrics, read with an admin key)."""
    want = f'planner_gateway_outstanding_requests{{model="{model}"}} 1'
    deadline = time.monotonic() + budget_s(timeout_s)
    while want not in httpx.get(url + "/metrics", headers=bearer(admin), timeout=10).text:
        assert time.monotonic() < deadline, "the slow request never reached the engine"
        time.sleep(0.05)


def assert_openai_error(r: httpx.Response, status: int, kind: str) -> None:
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == status and err["type"] == kind and err["message"]


def test_keys_401_403_429_with_openai_bodies_and_the_key_name_as_user(gateway, tmp_path):
    kf = tmp_path / "keys.yaml"
    alice = add_key(kf, "alice", models=["a"], requests_per_minute=3)
    bob = add_key(kf, "bob", max_concurrency=1)
    ops = add_key(kf, "ops", admin=True)
    th = gateway(keys_path=kf)
    # No key, a wrong key, another scheme: 401, an OpenAI-style body, on every route.
    for h in ({}, bearer("sk-planner-wrong"), {"Authorization": "Basic garbage"}):
        r = post(th, headers=h, model="a", prompt="x")
        assert_openai_error(r, 401, "AuthenticationError")
        assert r.headers["WWW-Authenticate"] == "Bearer"
    assert httpx.get(th.url + "/v1/models").status_code == 401
    # A model outside the key's list: 403 naming what it may call; /v1/models shows only those.
    r = post(th, alice, model="b", prompt="x")
    assert_openai_error(r, 403, "PermissionDeniedError")
    assert r.json()["error"]["models"] == ["a"]
    models = httpx.get(th.url + "/v1/models", headers=bearer(alice)).json()["data"]
    assert [m["id"] for m in models] == ["a"]
    # X-User of an ordinary key is ignored: the user is the key's name.
    assert post(th, alice, headers={"X-User": "admin"}, model="a", prompt="x").status_code == 200
    assert post(th, alice, model="a", prompt="x").status_code == 200
    r = post(th, alice, model="a", prompt="x")  # the fourth in a minute (the 403 counts)
    assert_openai_error(r, 429, "RateLimitError")
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    # max_concurrency 1: a second request while one is in flight is 429, then room again.
    with ThreadPoolExecutor(1) as ex:
        slow = ex.submit(post, th, bob, model="b", prompt="x", delay_s=3.0)
        in_flight(th.url, "b", ops)
        r = post(th, bob, model="b", prompt="x")
        assert slow.result().status_code == 200
    assert_openai_error(r, 429, "RateLimitError")
    assert int(r.headers["Retry-After"]) >= 1
    assert post(th, bob, model="b", prompt="x").status_code == 200
    got = wait_rows(tmp_path, 4)
    assert sorted(g["user"] for g in got) == ["alice", "alice", "bob", "bob"]
    fails = wait_rows(tmp_path, 3, "failures")
    assert sorted((f["user"], f["status"]) for f in fails) == [
        ("alice", 403),
        ("alice", 429),
        ("bob", 429),
    ]
    assert httpx.get(th.url + "/metrics").status_code == 401  # with keys, loopback too
    assert httpx.get(th.url + "/health").json() == {"status": "ok", "auth": "keys"}
    text = httpx.get(th.url + "/metrics", headers=bearer(ops)).text
    assert 'planner_gateway_key_requests_total{key="alice"} 3' in text  # the 403 too
    assert 'planner_gateway_auth_denied_total{key="bob",status="429"} 1' in text


def test_trusted_proxy_forwards_a_sub_identity(gateway, tmp_path):
    kf = tmp_path / "keys.yaml"
    ui = add_key(kf, "chat-ui", trusted_proxy=True)
    th = gateway(keys_path=kf)
    assert post(th, ui, headers={"X-User": "ann"}, model="a", prompt="x").status_code == 200
    assert post(th, ui, model="a", prompt="x").status_code == 200
    assert sorted(g["user"] for g in wait_rows(tmp_path, 2)) == ["chat-ui", "chat-ui/ann"]


def test_key_ids_without_keys_are_an_hmac_with_the_install_secret(gateway, tmp_path):
    import hashlib

    th = gateway()
    assert post(th, "sk-some-client-key", model="a", prompt="x").status_code == 200
    (row,) = wait_rows(tmp_path, 1)
    bare = "key-" + hashlib.sha256(b"sk-some-client-key").hexdigest()[:12]
    secret = bytes.fromhex((tmp_path / INSTALL_SECRET).read_text())
    assert row["user"] == key_id(secret, "sk-some-client-key") != bare
    assert (tmp_path / INSTALL_SECRET).stat().st_mode & 0o777 == 0o600
    assert key_id(b"another install's secret", "sk-some-client-key") != row["user"]


def test_keys_file_change_is_picked_up_without_dropping_requests_in_flight(gateway, tmp_path):
    kf = tmp_path / "keys.yaml"
    alice, ops = add_key(kf, "alice"), add_key(kf, "ops", admin=True)
    th = gateway(keys_path=kf, watch_s=0.05)
    with ThreadPoolExecutor(1) as ex:
        slow = ex.submit(post, th, alice, model="a", prompt="x", delay_s=5.0)
        in_flight(th.url, "a", ops)
        bob = add_key(kf, "bob")
        deadline = time.monotonic() + 10
        while post(th, bob, model="a", prompt="x").status_code != 200:
            assert time.monotonic() < deadline, "the new key was not picked up"
            time.sleep(0.05)
        remove_key(kf, "alice")
        while post(th, alice, model="a", prompt="x").status_code != 401:
            assert time.monotonic() < deadline, "the removed key still works"
            time.sleep(0.05)
        assert not slow.done()  # still in flight across both reloads
        assert slow.result().status_code == 200  # admitted before: not dropped
    # A broken file keeps the keys in force.
    kf.write_text("kind: keys\nkeys: [{name: x, hash: nope}]\n")
    time.sleep(0.5)
    assert post(th, bob, model="a", prompt="x").status_code == 200


def _proc_env() -> dict[str, str]:
    root = HERE.parents[1]
    return {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{root}", "PYTHONUNBUFFERED": "1"}


def test_sighup_reloads_keys_with_a_request_in_flight(tmp_path):
    kf = tmp_path / "keys.yaml"
    alice, ops = add_key(kf, "alice"), add_key(kf, "ops", admin=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "gw.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(PROC),
            "serve",
            "--state",
            str(tmp_path / "s"),
            "--port",
            str(port),
            "--keys",
            str(kf),
            "--watch-s",
            "3600",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_proc_env(),
    )

    def call(key, **body):
        return httpx.post(url + "/v1/completions", json=body, headers=bearer(key), timeout=30)

    try:
        assert wait_health(url, lambda: proc.poll() is None), (tmp_path / "gw.log").read_text()
        with ThreadPoolExecutor(1) as ex:
            slow = ex.submit(call, alice, model="a", prompt="x", delay_s=5.0)
            in_flight(url, "a", ops)
            bob = add_key(kf, "bob")
            remove_key(kf, "alice")
            assert call(bob, model="a", prompt="x").status_code == 401  # not yet re-read
            proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while call(bob, model="a", prompt="x").status_code != 200:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            assert call(alice, model="a", prompt="x").status_code == 401
            assert not slow.done()
            assert slow.result().status_code == 200  # in flight across the reload
        assert proc.poll() is None
    finally:
        stop_server(proc)  # SIGTERM, then SIGKILL after 30 s
        log.close()


def _plan(d: Path) -> Path:
    """The CPU example's inputs and a plan of one host-tier instance of tiny-a (never woken
    here: the gateway starts without its weights)."""
    from planner.app.example import write_one_instance_plan

    return write_one_instance_plan(d, free_port())


def test_non_loopback_bind_without_keys_exits_2_with_the_fix(tmp_path):
    plan = _plan(tmp_path)
    state = tmp_path / "state"
    for host in ("0.0.0.0", "10.77.0.1", "::"):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "planner.cli.main",
                "gateway",
                "--plan",
                str(plan),
                "--state-dir",
                str(state),
                "--host",
                host,
                "--port",
                str(free_port()),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=_proc_env(),
        )
        assert r.returncode == 2, r.stderr
        assert "--keys" in r.stderr and "fix:" in r.stderr and "--insecure-no-auth" in r.stderr
    assert not state.exists()  # refused before any side effect


@pytest.fixture
def netns():
    """A network namespace with loopback up and 10.77.0.1 on it: a peer that is not loopback."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for a network namespace")
    name = f"keys-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        pytest.skip("cannot create a network namespace")
    procs: list[subprocess.Popen] = []
    try:
        for cmd in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", "10.77.0.1/32", "dev", "lo"],
        ):
            subprocess.run(["ip", "netns", "exec", name, *cmd], check=True)
        yield name, procs
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def _ns_client(ns: str, url: str, reqs: list, log: Path | None = None) -> list:
    r = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, str(PROC), "client", url, json.dumps(reqs)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_proc_env(),
    )
    assert r.returncode == 0, r.stderr + (log.read_text() if log is not None else "")
    return json.loads(r.stdout)


def test_metrics_and_details_need_an_admin_key_from_other_hosts(netns, tmp_path):
    ns, procs = netns
    kf = tmp_path / "keys.yaml"
    alice, ops = add_key(kf, "alice"), add_key(kf, "ops", admin=True)
    cmd = [
        "ip",
        "netns",
        "exec",
        ns,
        sys.executable,
        str(PROC),
        "serve",
        "--state",
        str(tmp_path / "s"),
        "--host",
        "10.77.0.1",
        "--port",
        "8000",
        "--keys",
        str(kf),
    ]
    procs.append(subprocess.Popen(cmd, env=_proc_env()))
    got = _ns_client(
        ns,
        "http://10.77.0.1:8000",
        [
            ["GET", "/health", {}],
            ["GET", "/metrics", {}],
            ["GET", "/metrics", bearer(alice)],
            ["GET", "/metrics", bearer(ops)],
            ["GET", "/health", bearer(ops)],
            ["GET", "/v1/models", bearer(alice)],
        ],
    )
    assert got[0][:2] == [200, {"status": "ok", "auth": "keys"}]  # liveness only
    assert got[1][0] == 401 and got[1][1]["error"]["type"] == "AuthenticationError"
    assert got[2][0] == 403 and got[2][1]["error"]["type"] == "PermissionDeniedError"
    assert got[3][0] == 200 and "planner_gateway_requests_total" in got[3][1]
    assert got[4][0] == 200 and set(got[4][1]["instances"]) == {"a0", "b0"}
    assert got[5][0] == 200


def test_insecure_no_auth_is_printed_and_reported_by_health(netns, tmp_path):
    ns, procs = netns
    plan = _plan(tmp_path)
    err = tmp_path / "gw.err"
    cmd = [
        "ip",
        "netns",
        "exec",
        ns,
        sys.executable,
        "-m",
        "planner.cli.main",
        "gateway",
        "--plan",
        str(plan),
        "--state-dir",
        str(tmp_path / "s"),
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--insecure-no-auth",
    ]
    with open(err, "wb") as f:
        procs.append(subprocess.Popen(cmd, stdout=f, stderr=f, env=_proc_env()))
    reqs = [["GET", "/health", {}], ["GET", "/metrics", {}]]
    got = _ns_client(ns, "http://10.77.0.1:8000", reqs, err)
    assert got[0][:2] == [200, {"status": "ok", "auth": "insecure-no-auth"}]
    assert got[1][0] == 403  # no admin key exists: /metrics only from the gateway's host
    assert "--insecure-no-auth" in err.read_text() and "WARNING" in err.read_text()


def test_keys_kind_schema_validate_and_cli(tmp_path, capsys):
    from planner.cli.main import main

    kf = tmp_path / "k.yaml"

    def run(*args: str) -> int:
        with pytest.raises(SystemExit) as e:
            main(list(args))
        return e.value.code or 0

    assert run("keys", "add", "alice", "--models", "a", "--rpm", "5", "--file", str(kf)) == 0
    out = capsys.readouterr()
    key = out.out.strip()
    assert key.startswith("sk-planner-") and key not in kf.read_text()
    assert kf.stat().st_mode & 0o777 == 0o600
    assert run("keys", "add", "ops", "--admin", "--file", str(kf)) == 0
    assert run("keys", "add", "ci", "--models", "a,b", "--models", "c", "--file", str(kf)) == 0
    assert read_keys(kf).by_name("ci").models == ["a", "b", "c"]
    assert run("keys", "remove", "ci", "--file", str(kf)) == 0
    capsys.readouterr()
    assert run("keys", "list", "--json", "--file", str(kf)) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(k["name"], k["models"], k["admin"]) for k in listed] == [
        ("alice", ["a"], False),
        ("ops", None, True),
    ]
    assert "hash" not in listed[0]
    assert run("validate", str(kf)) == 0 and "(keys)" in capsys.readouterr().out
    assert run("schema", "keys") == 0
    assert (
        "requests_per_minute" in json.loads(capsys.readouterr().out)["$defs"]["Key"]["properties"]
    )
    from planner.app.example import CPU_FILES

    (tmp_path / "models.yaml").write_text(CPU_FILES["models.yaml"])
    assert run("validate", str(kf), "--models", str(tmp_path / "models.yaml")) == 2
    err = capsys.readouterr().err  # alice may call `a`, which models.yaml does not hold
    assert "keys[0].models[0]" in err and "not served" in err and "fix:" in err
    assert run("keys", "remove", "alice", "--file", str(kf)) == 0
    assert [k.name for k in read_keys(kf).keys] == ["ops"]
    # Bad files: exit 2 naming file, field and fix.
    bad = {
        "keys[0].hash": f"keys:\n- name: a\n  hash: {key}\n",
        "keys[1].name": f"keys:\n- {{name: a, hash: '{hash_key('x')}'}}\n"
        f"- {{name: a, hash: '{hash_key('y')}'}}\n",
        "keys[0].requests_per_minute": f"kind: keys\nkeys:\n- {{name: a, hash: '{hash_key('x')}'"
        ", requests_per_minute: 0}\n",
        "keys[0].modles": f"kind: keys\nkeys:\n- {{name: a, hash: '{hash_key('x')}', modles: []}}\n",
    }
    for path, text in bad.items():
        kf.write_text(text)
        assert run("validate", str(kf)) == 2
        err = capsys.readouterr().err
        assert f"{kf}: {path}:" in err and "fix:" in err, err
        if path == "keys[0].hash":
            assert "a key itself, not its hash" in err


def test_a_deleted_keys_file_leaves_no_key_and_a_loosened_one_is_not_reloaded(tmp_path, caplog):
    """Issue 43: deleting the keys file kept the old keys in force, and a file turned 0644
    after start was reloaded silently."""
    from planner.adjuster.gateway.auth import Auth

    kf = tmp_path / "keys.yaml"
    alice = add_key(kf, "alice")
    auth = Auth(b"s" * 32, kf, model_names=["a"])
    headers = bearer(alice)
    assert auth.caller(headers, "10.0.0.1") is not None
    kf.unlink()
    assert auth.reload() and auth.caller(headers, "10.0.0.1") is None
    assert "is gone: no key is valid" in caplog.text
    bob = add_key(kf, "bob")
    assert auth.reload() and auth.caller(bearer(bob), "10.0.0.1") is not None
    carol = add_key(kf, "carol")
    kf.chmod(0o644)
    assert not auth.reload()
    assert auth.caller(bearer(carol), "10.0.0.1") is None  # not read: bob's file stays
    assert auth.caller(bearer(bob), "10.0.0.1") is not None
    assert "others may read it (mode 644)" in caplog.text


def _head_only(url: str, head: bytes) -> bytes:
    """Send a request head whose body never comes; what the gateway answers before it
    closes the connection (within 10 s)."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(head)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got


def test_limits_and_the_body_budget_answer_on_the_head_before_any_body_byte(gateway, tmp_path):
    """Issue 43: a key's max_concurrency was checked only after its body was read, and no
    bound held the bodies in memory. Now the 429 and the budget's 503 come on the head
    alone (the body is never sent here: the old gateway waited for it)."""
    kf = tmp_path / "keys.yaml"
    bob, ops = add_key(kf, "bob", max_concurrency=1), add_key(kf, "ops", admin=True)
    cfg = GatewayConfig(
        log_flush_s=0.05, body_budget_bytes=1 << 20, body_budget_per_key_bytes=1 << 20
    )
    th = gateway(config=cfg, keys_path=kf)
    post_head = b"POST /v1/completions HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer %s\r\n"
    with ThreadPoolExecutor(1) as ex:
        slow = ex.submit(post, th, bob, model="b", prompt="x", delay_s=3.0)
        in_flight(th.url, "b", ops)
        got = _head_only(th.url, post_head % bob.encode() + b"Content-Length: 100\r\n\r\n")
        assert slow.result().status_code == 200
    assert got.startswith(b"HTTP/1.1 429 ") and b"Retry-After: 1" in got
    got = _head_only(th.url, post_head % ops.encode() + b"Content-Length: 2000000\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in got
    assert b"Connection: close" in got
    got = _head_only(
        th.url,
        b"POST /v1/completions HTTP/1.1\r\nHost: h\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + b"1\r\nx\r\n" * 1000,
    )
    assert got.startswith(b"HTTP/1.1 401 ")  # no key: answered, its chunks never parsed
    text = httpx.get(th.url + "/metrics", headers=bearer(ops)).text
    assert "planner_gateway_body_budget_refused_total 1" in text


def test_a_connections_remembered_key_is_dropped_by_a_reload_and_never_shared(tmp_path):
    """The key a kept-alive connection presented is remembered on that connection (no hash
    per request); a reload that revokes it ends it at the next request, another connection
    does not see it, and a different key on the same connection is looked up."""
    from types import SimpleNamespace

    from planner.adjuster.gateway.auth import Auth

    kf = tmp_path / "keys.yaml"
    alice, bob = add_key(kf, "alice"), add_key(kf, "bob")
    auth = Auth(b"s" * 32, kf, model_names=["a"])
    conn, other = SimpleNamespace(auth_memo=None), SimpleNamespace(auth_memo=None)
    assert auth.caller(bearer(alice), "10.0.0.1", conn).key.name == "alice"
    assert conn.auth_memo[1] == alice  # (kept by the connection that sent it)
    assert auth.caller(bearer(alice), "10.0.0.1", conn).key.name == "alice"
    assert auth.caller(bearer(bob), "10.0.0.1", conn).key.name == "bob"
    assert auth.caller(bearer("sk-nope"), "10.0.0.1", conn) is None
    assert other.auth_memo is None
    assert auth.caller(bearer(alice), "10.0.0.1", conn).key.name == "alice"
    remove_key(kf, "alice")
    assert auth.reload()
    assert auth.caller(bearer(alice), "10.0.0.1", conn) is None
    assert auth.caller(bearer(bob), "10.0.0.1", conn).key.name == "bob"
