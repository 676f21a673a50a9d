"""Loopback-only network namespaces for the Ray tests (docs/environment.md: Ray on loopback)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def loopback_namespace(prefix: str) -> Iterator[str]:
    """A network namespace with only loopback up (Ray stays on 127.0.0.1 inside it).

    At the end every process in it (all started by the test) is terminated, then killed,
    and the namespace deleted. `ray stop` is not used: it stops Ray clusters machine-wide.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root to create a network namespace (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("the `ip` command (iproute2) is missing")
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {r.stderr.strip()}")
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = _netns_pids(name)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), sig)
            deadline = time.monotonic() + 10
            while pids and time.monotonic() < deadline:
                time.sleep(0.2)
                pids = _netns_pids(name)
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def _netns_pids(name: str) -> list[str]:
    return subprocess.run(
        ["ip", "netns", "pids", name], capture_output=True, text=True
    ).stdout.split()
