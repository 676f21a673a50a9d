"""The gateway under faults (issue 29, item 5): its request log on a full disk, a damaged
log, retention; slow, idle, too many and malformed clients; a busy port.

A full disk is SQLite's own SQLITE_FULL ("database or disk is full"), reached through
`PRAGMA max_page_count` on the log's real connection: the same error and code path as a full
file system, without needing one (bench/gateway_faults.py fills a real tmpfs).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from gateway_fakes import inst, post, rows, wait_rows

from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread
from planner.adjuster.gateway.requestlog import RequestLog
from planner.errors import InputError
from planner.schemas.plan import Point


def _row(t: float, model: str = "a") -> tuple:
    return (t, "u", "s", model, 1, 1, 0, 0.1, 0.2, 0.0, 200, "a0", "", 0)


def _fill_disk(log: RequestLog) -> None:
    """SQLITE_FULL from now on: the file may not grow by a page."""
    with log._lock:
        pages = log._con.execute("PRAGMA page_count").fetchone()[0]
        log._con.execute(f"PRAGMA max_page_count={pages}")


def _free_disk(log: RequestLog) -> None:
    with log._lock:
        log._con.execute("PRAGMA max_page_count=1073741823")


def test_a_full_disk_keeps_rows_bounded_counts_drops_and_resumes(tmp_path, caplog):
    log = RequestLog(tmp_path / "requests.sqlite", max_pending=50, warn_every_s=3600)
    _fill_disk(log)
    caplog.set_level(logging.WARNING, logger="planner.gateway")
    for k in range(80):  # enough rows that the file must grow
        log.add((float(k), "u" * 5000, "s", "a", 1, 1, 0, 0.1, 0.2, 0.0, 200, "a0", "", 0))
        assert log.flush(now_s=1000.0 + k) is False
    assert log.write_failures == 80
    assert log.pending() == 50 and log.dropped == 30  # the oldest went first
    msgs = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(msgs) == 1  # once per interval, not once per flush
    assert "disk is full" in msgs[0] and "repair" not in msgs[0]
    _free_disk(log)
    assert log.flush(now_s=2000.0) is True  # nobody restarted anything
    assert any("writing again" in r.getMessage() for r in caplog.records)
    assert log.close() == 0
    got = rows(tmp_path)
    assert [r["timestamp"] for r in got] == [float(k) for k in range(30, 80)]  # newest kept


def test_close_on_a_full_disk_returns_what_was_lost_and_does_not_raise(tmp_path):
    log = RequestLog(tmp_path / "requests.sqlite")
    _fill_disk(log)
    for k in range(200):
        log.add((float(k), "u" * 5000, "s", "a", 1, 1, 0, 0.1, 0.2, 0.0, 200, "a0", "", 0))
    assert log.close() == 200


def test_a_damaged_request_log_is_exit_2_naming_the_file(tmp_path):
    path = tmp_path / "requests.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    point = Point(name="p", instances=[inst("a0", "a", [0])])
    with pytest.raises(InputError) as e:
        Gateway(point, object(), state_dir=tmp_path)
    assert e.value.exit_code == 2 and str(path) in str(e.value)
    assert "repair" not in str(e.value) and "mv " in str(e.value)


def test_retention_deletes_rows_by_age_and_size(tmp_path):
    log = RequestLog(tmp_path / "requests.sqlite", max_age_s=100.0, max_bytes=1 << 40)
    for k in range(10):
        log.add(_row(float(k * 50)))
    assert log.flush(now_s=500.0)
    assert [r["timestamp"] for r in rows(tmp_path)] == [350.0, 400.0, 450.0]  # newest - 100
    log.close()
    log = RequestLog(tmp_path / "r2.sqlite", max_age_s=1e12, max_bytes=64 * 1024)
    for k in range(5000):
        log.add((float(k), "u" * 100, "s", "a", 1, 1, 0, 0.1, 0.2, 0.0, 200, "a0", "", 0))
    assert log.flush(now_s=1.0)
    con = sqlite3.connect(tmp_path / "r2.sqlite")
    n, first = con.execute("SELECT COUNT(*), MIN(timestamp) FROM requests").fetchone()
    con.close()
    assert 0 < n < 5000 and first > 0  # the oldest went, the newest stayed
    log.close()


def test_the_gateway_counts_log_failures_and_keeps_serving(setup, tmp_path):
    th, _ = setup([inst("a0", "a", [0], "gpu")], {"a0"})
    log = th.gateway.log
    _fill_disk(log)
    who = {"X-User": "u" * 200, "X-Session": "s" * 200}  # rows of ~450 bytes: pages fill
    for _ in range(30):
        assert post(th, model="a", prompt="x", headers=who).status_code == 200
    metrics = httpx.get(th.url + "/metrics").text
    n = _metric(metrics, "planner_gateway_log_write_failures_total")
    deadline = time.monotonic() + 10
    while n == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
        n = _metric(httpx.get(th.url + "/metrics").text, "planner_gateway_log_write_failures_total")
    assert n >= 1
    _free_disk(log)
    assert len(wait_rows(tmp_path, 30)) == 30  # writing resumed, no row lost


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


_SIGTERM_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
from gateway_fakes import FakeControl, inst
from planner.adjuster.gateway import Gateway, GatewayConfig, run_forever
from planner.schemas.plan import Point
point = Point(name="p", instances=[inst("a0", "a", [0], "gpu")])
ctl = FakeControl(point, {{"a0"}})
gw = Gateway(point, ctl, state_dir={state!r}, config=GatewayConfig(log_flush_s=0.05))
pages = gw.log._con.execute("PRAGMA page_count").fetchone()[0]
gw.log._con.execute(f"PRAGMA max_page_count={{pages}}")
run_forever(gw, "127.0.0.1", {port})
ctl.close()
"""


def test_sigterm_with_a_full_disk_exits_0_without_a_traceback(tmp_path):
    from planner.engines.process import free_port

    port = free_port()
    script = _SIGTERM_SCRIPT.format(
        tests=str(Path(__file__).parent), state=str(tmp_path), port=port
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{port}/v1/completions",
                    json={"model": "a", "prompt": "x" * 2000},
                    timeout=5,
                )
                if r.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        for _ in range(20):
            httpx.post(
                f"http://127.0.0.1:{port}/v1/completions",
                json={"model": "a", "prompt": "x"},
                headers={"X-User": "u" * 200, "X-Session": "s" * 200},  # rows fill pages
            )
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "could not be written" in err


# ----------------------------------------------------------------------------- clients


def _raw(th, data: bytes) -> socket.socket:
    s = socket.create_connection((th.host, th.port))
    s.sendall(data)
    return s


def _closed_within(s: socket.socket, timeout_s: float) -> bytes:
    """What the server sent before closing; AssertionError if it never closed."""
    s.settimeout(timeout_s)
    got = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return got
            got += chunk
    except TimeoutError:
        raise AssertionError("the gateway kept the connection open") from None
    except ConnectionResetError:
        return got
    finally:
        s.close()


def test_slow_headers_idle_connections_and_slow_bodies_are_closed(setup):
    th, _ = setup(
        [inst("a0", "a", [0], "gpu")], {"a0"}, header_timeout_s=1.0, body_timeout_s=1.0
    )  # keep-alive at its default (75 s): the header timeout closes the first
    slow_header = _raw(th, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # never finished
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    slow_body = _raw(th, head + b'{"model":')
    assert _closed_within(slow_header, 20) == b""
    answer = _closed_within(slow_body, 20)
    assert b" 408 " in answer.split(b"\r\n")[0] and b"paused" in answer
    assert (
        _metric(httpx.get(th.url + "/metrics").text, "planner_gateway_header_timeouts_total") == 1
    )
    th2, _ = setup([inst("b0", "b", [0], "gpu")], {"b0"}, keepalive_timeout_s=1.0)
    assert _closed_within(_raw(th2, b""), 20) == b""  # idle: closed by the keep-alive timeout


def test_at_the_connection_cap_an_idle_connection_makes_room(setup):
    th, _ = setup([inst("a0", "a", [0], "gpu")], {"a0"}, max_connections=16)
    held = [_raw(th, b"POST /v1/comp") for _ in range(40)]  # half-open, never finished
    try:
        assert post(th, model="a", prompt="x").status_code == 200
        text = httpx.get(th.url + "/metrics").text
        assert _metric(text, "planner_gateway_connections_open") <= 16
        assert _metric(text, "planner_gateway_connections_evicted_total") >= 24
    finally:
        for s in held:
            s.close()


def test_the_soft_open_file_limit_is_raised_to_the_hard_one():
    import resource

    from planner.adjuster.gateway.guard import raise_open_file_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard < 256:
        pytest.skip("no finite hard limit to raise to")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        assert raise_open_file_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_loop_errors_are_logged_once_per_interval(caplog):
    import asyncio

    from planner.adjuster.gateway.guard import Guard

    guard = Guard(cap=100, header_timeout_s=60, warn_every_s=3600)
    caplog.set_level(logging.WARNING, logger="planner.gateway")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(500):
            err = OSError(24, "Too many open files")
            guard.loop_errors(
                loop, {"message": "socket.accept() out of system resource", "exception": err}
            )

    asyncio.run(run())
    assert sum("socket.accept()" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(
    ("body", "reason", "param"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "too_deep", None),
        (b"{not json", "not_json", None),
        (b"[1, 2]", "not_object", None),
        (
            json.dumps({"model": "a", "prompt": "x", "stream": "false"}).encode(),
            "bad_stream",
            "stream",
        ),
        (
            json.dumps({"model": "a", "stream": True, "stream_options": "x"}).encode(),
            "bad_stream_options",
            "stream_options",
        ),
        (
            json.dumps(
                {"model": "a", "stream": True, "stream_options": {"include_usage": "y"}}
            ).encode(),
            "bad_stream_options",
            "stream_options",
        ),
        (json.dumps({"model": 7}).encode(), "no_model", "model"),
    ],
)
def test_malformed_bodies_are_400_json_counted_and_logged(setup, tmp_path, body, reason, param):
    th, ctl = setup([inst("a0", "a", [0], "gpu")], {"a0"})
    r = httpx.post(th.url + "/v1/completions", content=body, timeout=30)
    assert r.status_code == 400
    err = r.json()["error"]
    assert (err["type"], err["code"], err["param"]) == ("BadRequestError", 400, param)
    text = httpx.get(th.url + "/metrics").text
    assert f'planner_gateway_malformed_requests_total{{reason="{reason}"}} 1' in text
    (row,) = wait_rows(tmp_path, 1, "failures")
    assert row["status"] == 400
    assert ctl.engines["a0"].peak == 0  # nothing reached the engine


def test_bodies_over_16_mib_are_refused_and_names_are_cut(setup, tmp_path):
    th, _ = setup([inst("a0", "a", [0], "gpu")], {"a0"})
    big = b'{"model": "a", "prompt": "' + b"x" * (17 * 1024 * 1024) + b'"}'
    r = httpx.post(th.url + "/v1/completions", content=big, timeout=60)
    assert r.status_code == 413 and "16 MiB" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: the cap holds while reading
        for _ in range(20):
            yield b"x" * (1024 * 1024)

    r = httpx.post(th.url + "/v1/completions", content=chunks(), timeout=60)
    assert r.status_code == 413
    name = "m" * 100_000
    r = post(th, model=name, prompt="x", headers={"X-User": "u" * 8000})
    assert r.status_code == 404 and len(r.text) < 2000
    long_header = {"X-Session": "s" * 20_000}  # beyond the header field limit
    assert post(th, model="a", prompt="x", headers=long_header).status_code == 431
    got = wait_rows(tmp_path, 3, "failures")
    assert max(len(g["model"]) for g in got) <= 200
    assert max(len(g["user"]) for g in got) <= 200


def test_a_busy_port_is_exit_2_with_the_fix(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        point = Point(name="p", instances=[inst("a0", "a", [0], "gpu")])
        from gateway_fakes import FakeControl

        ctl = FakeControl(point, set())
        gw = Gateway(point, ctl, state_dir=tmp_path, config=GatewayConfig())
        th = GatewayThread(gw, port=port)
        with pytest.raises(InputError) as e:
            th.start()
        th.stop()
        ctl.close()
    assert e.value.exit_code == 2
    assert f"127.0.0.1:{port} is in use" in str(e.value) and "--port" in str(e.value)


def test_a_trickling_body_is_ended_though_it_never_pauses(setup):
    th, _ = setup([inst("a0", "a", [0], "gpu")], {"a0"}, body_timeout_s=1.0)
    s = _raw(th, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
    got = b""
    s.settimeout(0.3)
    for _ in range(100):  # a byte every 0.3 s, for at most 30 s
        try:
            s.sendall(b" ")
            got += s.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if b"\r\n\r\n" in got:
            break
    s.close()
    assert b" 408 " in got.split(b"\r\n")[0] and b"slower than" in got
