"""`planner gateway --access-log PATH`: one line per request, private, never a key or a prompt
(fake engines: the lines are the gateway's; conftest.py's gateway fixture)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import httpx
import pytest
from gateway_fakes import FakeControl, inst
from waits import budget_s

from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread
from planner.adjuster.gateway.accesslog import AccessEntry, AccessLog, format_line
from planner.adjuster.gateway.auth import Auth
from planner.engines.process import free_port
from planner.errors import InputError
from planner.keys import add_key
from planner.schemas.plan import Point

PROMPT = "my secret prompt 4711"


def _lines(path: Path, n: int, timeout_s: float = 10.0) -> list[str]:
    deadline = time.monotonic() + budget_s(timeout_s)
    while True:
        text = path.read_text() if path.exists() else ""
        lines = text.splitlines()
        if len(lines) >= n or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


@pytest.fixture
def gateway(tmp_path):
    """A gateway with keys and an access log over awake fake engines of models a and b."""
    old = os.umask(0o022)
    keys = tmp_path / "keys.yaml"
    key = add_key(keys, "alice")
    point = Point(name="p", instances=[inst("a0", "a", [0]), inst("b0", "b", [1])])
    ctl = FakeControl(point, {"a0", "b0"})
    auth = Auth.open(tmp_path, keys, model_names=["a", "b"])
    access = tmp_path / "logs" / "access.log"
    gw = Gateway(
        point,
        ctl,
        state_dir=tmp_path / "state",
        config=GatewayConfig(log_flush_s=0.05),
        auth=auth,
        access_log=access,
    )
    th = GatewayThread(gw, port=free_port()).start()
    try:
        yield th, key, access
    finally:
        th.stop()
        ctl.close()
        os.umask(old)


def test_each_request_gets_one_private_line_without_key_or_prompt(gateway):
    th, key, access = gateway
    auth = {"Authorization": f"Bearer {key}"}
    body = {"model": "a", "prompt": PROMPT, "max_tokens": 3}
    r = httpx.post(th.url + "/v1/completions", json=body, headers=auth, timeout=30)
    assert r.status_code == 200
    r = httpx.post(th.url + "/v1/chat/completions", json={**body, "model": "zz"}, headers=auth)
    assert r.status_code == 404
    ok, unknown = _lines(access, 2)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z user=alice model=a route=/v1/completions "
        r"status=200 wake_wait_s=0\.000 latency_s=\d+\.\d{3} input_tokens=7 output_tokens=3",
        ok,
    ), ok
    assert " model=zz route=/v1/chat/completions status=404 " in unknown
    assert unknown.endswith('error="unknown model"')
    text = access.read_text()
    assert key not in text and PROMPT not in text and "Bearer" not in text
    assert access.stat().st_mode & 0o777 == 0o600  # under umask 022


def test_a_request_refused_for_its_key_gets_a_line_too(gateway):
    """Issue 42 item 5. Before: a 401 (no key, or a wrong one) left no line."""
    th, _, access = gateway
    body = {"model": "a", "prompt": PROMPT, "max_tokens": 3}
    wrong = {"Authorization": "Bearer not-a-key-4711"}
    assert httpx.post(th.url + "/v1/completions", json=body, headers=wrong).status_code == 401
    (line,) = _lines(access, 1)
    assert ' user="" model="" route=/v1/completions status=401 ' in line
    assert line.endswith('error="no valid key"') and "not-a-key-4711" not in line


def test_a_rotated_access_log_is_created_again(gateway):
    th, key, access = gateway
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.post(th.url + "/v1/completions", json={"model": "a"}, headers=auth).is_success
    assert len(_lines(access, 1)) == 1
    access.rename(access.with_suffix(".1"))  # what logrotate does
    assert httpx.post(th.url + "/v1/completions", json={"model": "b"}, headers=auth).is_success
    (line,) = _lines(access, 1)
    assert " model=b " in line and access.stat().st_mode & 0o777 == 0o600


def test_values_are_quoted_so_a_line_stays_one_line():
    e = AccessEntry(0.0, 'eve\nuser=x "', "m", "/v1/completions", 499, 0.0, 1.5, 0, 0, "", "")
    line = format_line(e)
    assert "\n" not in line and 'user="eve\\nuser=x \\""' in line
    assert line.startswith("1970-01-01T00:00:00.000Z ")


def test_an_access_log_that_cannot_be_opened_is_a_clear_input_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError) as e:
        AccessLog(tmp_path / "file" / "access.log")
    assert e.value.exit_code == 2 and "access log" in str(e.value)


def test_the_cli_offers_access_log():
    from typer.testing import CliRunner

    from planner.cli.main import app

    out = CliRunner().invoke(app, ["gateway", "--help"], env={"COLUMNS": "200"}).output
    assert "--access-log" in out
