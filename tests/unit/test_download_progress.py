"""A first start that downloads its weights shows progress instead of running into
`apply --timeout` (issue 32 item 1): while the server's hub cache folder grows, the wait for
readiness does not count, and a line says how much has arrived.

The server here is a small Python process on loopback that writes into a hub cache folder
as the hub client does (a growing `blobs/<hash>.incomplete`), then answers `/v1/models`: a
stand-in for vLLM downloading from the hub, which this machine cannot reach.

The tests' `--timeout` is taken from the load (`_budget_s`): a loaded 2-core machine starts
the stand-in and polls it several times slower than an idle one. The download lasts longer
than that budget, so a wait that counted it would still time out."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.adjuster.backends.local import LocalBackend
from planner.engines import process
from planner.engines.base import get_engine
from planner.engines.download import hub_repo_dir
from planner.errors import LaunchError
from planner.schemas.plan import Instance

SERVER = """
import http.server, os, sys, time
blobs, port, grow_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
os.makedirs(blobs, exist_ok=True)
t0 = time.monotonic()
with open(os.path.join(blobs, "abc.incomplete"), "wb") as f:
    while time.monotonic() - t0 < grow_s:
        f.write(b"x" * 65536); f.flush(); time.sleep(0.1)
if len(sys.argv) > 4:
    time.sleep(600)  # a hang after the download
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{"data": []}')
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""
LOAD_FACTOR = 10  # the budget over one start-up of the stand-in's interpreter (polls, and the
# server's steps after its download, take a few start-ups' worth of time on a loaded machine)


def _budget_s() -> float:
    """`--timeout` for these tests, in s: at least 1 s, LOAD_FACTOR times how long an
    interpreter that imports what the stand-in imports takes to start now (about 0.05 s
    idle), and 1 s per runnable process per core over the last minute (a sustained load that
    one start-up may have missed)."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import http.server, os, sys, time"], check=True)
    startup_s = time.monotonic() - t0
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return max(1.0, LOAD_FACTOR * startup_s, per_core)


def _started(repo: Path) -> None:
    """Wait until the stand-in writes its first bytes: its start-up, which a loaded machine
    stretches, is then not part of the time `wait_ready` counts."""
    t0 = time.monotonic()
    blob = repo / "blobs" / "abc.incomplete"
    while not (blob.exists() and blob.stat().st_size > 0):
        assert time.monotonic() - t0 < 120, "the stand-in server never started its download"
        time.sleep(0.01)


def _serve(tmp_path, grow_s: float, *hang: str):
    repo = hub_repo_dir("org/big-model", {"HF_HOME": str(tmp_path / "hf")})
    assert repo == tmp_path / "hf" / "hub" / "models--org--big-model"
    port = process.free_port()
    log = tmp_path / "server.log"
    argv = [sys.executable, "-c", SERVER, str(repo / "blobs"), str(port), str(grow_s), *hang]
    proc = process.start_server(argv, {}, log)
    _started(repo)
    return repo, port, log, proc


def test_a_growing_download_is_shown_and_not_counted_against_the_timeout(tmp_path):
    timeout_s = _budget_s()
    repo, port, log, proc = _serve(tmp_path, timeout_s + 2.0)
    lines: list[str] = []
    try:
        waited = process.wait_ready(
            get_engine("vllm"),
            "127.0.0.1",
            port,
            proc,
            log,
            timeout_s=timeout_s,
            poll_s=0.2,
            download_dir=repo,
            progress=lines.append,
        )
    finally:
        process.stop_server(proc, 5.0)
    assert waited > timeout_s  # longer than --timeout: the download's time did not count
    assert lines and "downloading its weights into" in lines[0] and "GiB so far" in lines[0]


def test_a_hang_after_the_download_still_times_out_and_says_what_came(tmp_path):
    timeout_s = _budget_s()
    repo, port, log, proc = _serve(tmp_path, 1.5 * timeout_s, "hang")
    try:
        with pytest.raises(LaunchError) as e:
            process.wait_ready(
                get_engine("vllm"),
                "127.0.0.1",
                port,
                proc,
                log,
                timeout_s=timeout_s,
                poll_s=0.2,
                download_dir=repo,
            )
    finally:
        process.stop_server(proc, 5.0)
    assert e.value.reason == "timeout" and "s downloading (" in str(e.value)


def test_the_local_backend_watches_the_hub_folder_of_a_repo_id(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    inst = Instance.model_validate(
        {
            "id": "m-0",
            "model": "m",
            "variant": "bf16",
            "node": "local",
            "gpus": [],
            "tp": 1,
            "tier": "gpu",
            "port": process.free_port(),
            "memory_gib": {"weights": 0.01, "kv": 0.5, "overhead": 0.1},
        }
    )
    be = LocalBackend("cpu", python="/bin/true")  # the server's command exits at once
    h = be.start(inst, model_path="org/big-model", served_name="m", log_path=str(tmp_path / "l"))
    assert h.extra["download_dir"] == str(tmp_path / "cache" / "models--org--big-model")
    local = be.start(inst, model_path=str(tmp_path), served_name="m", log_path=str(tmp_path / "l"))
    assert local.extra["download_dir"] == ""  # a folder on disk: nothing to download
