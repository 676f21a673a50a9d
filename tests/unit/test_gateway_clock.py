"""The gateway reads time only through its injected Clock (issue 27 item 5): a test's clock
is what its logs say, and no part calls the time module or the loop's clock itself."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

from gateway_fakes import inst, post, wait_rows

from planner.adjuster.gateway import Clock, Gateway, GatewayConfig, GatewayThread
from planner.engines.process import free_port
from planner.schemas.plan import Point

GATEWAY = Path(__file__).resolve().parents[2] / "adjuster" / "gateway"


def test_no_part_reads_time_but_through_the_clock():
    reads = []
    for path in sorted(GATEWAY.glob("*.py")):
        if path.name == "clock.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                name = f"{node.value.id}.{node.attr}"
                if node.value.id == "time" or node.attr in ("time", "now", "utcnow"):
                    reads.append(f"{path.name}:{node.lineno} {name}")
    assert reads == []


def test_the_request_log_is_stamped_by_the_injected_clock(tmp_path):
    from gateway_fakes import FakeControl

    ticks = itertools.count()
    clock = Clock(now_s=lambda: 1_000_000.0, mono_s=lambda: float(next(ticks)))
    point = Point(name="p", instances=[inst("a0", "a", [0], "gpu")])
    ctl = FakeControl(point, {"a0"})
    gw = Gateway(
        point, ctl, state_dir=tmp_path, config=GatewayConfig(log_flush_s=0.05), clock=clock
    )
    th = GatewayThread(gw, port=free_port()).start()
    try:
        assert post(th, model="a", prompt="x").status_code == 200
        (row,) = wait_rows(tmp_path, 1)
    finally:
        th.stop()
        ctl.close()
    assert row["timestamp"] == 1_000_000.0
    # latency and TTFT are differences of mono_s readings: whole ticks of the fake clock
    assert row["latency_s"] >= row["ttft_s"] >= 1 and row["latency_s"] == int(row["latency_s"])
