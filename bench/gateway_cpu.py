"""The gateway's own CPU per proxied request, against a stub upstream (no vLLM).

Split: one gateway process (the real `Gateway` and `run_forever`, keys on: a file of 50
keys, the bench's with high limits) in front of one stub upstream process (an aiohttp server
that answers every completion at once with a fixed vLLM-like body and usage, so the engine
costs nothing and the gateway's CPU is what is measured). The client, in this process,
sends `--requests` non-streamed (and `--stream-requests` streamed) completions from
`--concurrency` connections after a warm-up; the gateway's CPU over them (the run time of
its threads, Linux /proc schedstat) divided by the requests is the figure. The stub stands
in for vLLM because only the gateway's side is measured here; `bench/gateway_overhead.py`
measures against the real engine.

`--delay-ms D`: the stub answers each completion after D ms, as an engine does; then the
gateway sleeps between a request and its answer and each request pays for waking it twice
(its head, the engine's answer). Measured (issue 43, 2-core VM, load 3-5, one client): 0.27
ms per request with no delay, 0.63-0.74 ms with 18 ms (user time: 0.21 -> 0.68 ms; the
syscalls per request are the same), as gateway_overhead.py's C=1 phase against the real
engine. What runs after a wake runs with cold caches (a small JSON round trip after an 18 ms
sleep costs about 0.18 ms more than back to back), so the delay multiplies the cost of the
gateway's own code: measured the same way (2026-12-07, 20 ms, one client), a bare TCP relay
took 0.17-0.19 ms per request against the gateway's 0.86, and
`bench/gateway_overhead.py --floor` puts a minimal proxy beside the gateway on the real
engine.

`--pages N`: then also the memory a request touches, in the gateway and in
bench/lib/floor_proxy.py (the least a Python proxy does, on the same stub): N times, after a
pause, the proxy's referenced bits are cleared (/proc/PID/clear_refs), one request goes
through it, and the KiB its mappings referenced since (/proc/PID/smaps_rollup) are added up.
On a machine whose caches go cold while a proxy sleeps, the CPU of a request that follows a
pause grows with this figure, and the figure itself does not depend on the machine's load.
Measured (issue 43, 2026-12-07, 20 ms delay, one client, 40 samples, two runs): the
gateway took 0.78-0.79 ms of CPU a request and touched 3.3-3.4 MiB (by mapping: about 1.3
MiB of pymalloc's arenas and other anonymous memory, 1.1 MiB of libpython's code, 0.4 MiB
of the malloc heap); the floor touched 1.7 MiB, and as much (1.6-1.7) with the gateway's
modules imported before it serves, so the gateway's extra is the memory its own requests
touch, not the modules it loads. The figure includes a flush of the request log when one
falls in the sample (the gateway's batch period is 0.5 s).

`--compare ROUNDS`: then the gateway, bench/lib/floor_proxy.py, and the floor proxy with
the gateway's parts (`--parts`: the features the gateway's common path runs, over its
connection handling) in ROUNDS interleaved rounds of `--requests` at `--concurrency`, each
proxy's CPU as the gateway's is read; the medians are printed and added to RESULT. The three
figures split the gateway's CPU beyond the floor into what its features cost (parts - floor)
and what its server and client cost beyond the floor's (gateway - parts). Measured (issue
43, 2026-12-08, 20 ms delay, 6 rounds): 0.646, 0.550 and 0.390 ms at one client (500
requests a round), 0.160, 0.144 and 0.096 at eight (1000).

`--profile FILE` runs the gateway under cProfile and writes its stats to FILE (then the CPU
figure includes the profiler's cost: compare only runs without it).

Target (exit 1 when missed; set for no --delay-ms): <= 0.5 ms CPU per non-streamed request
(the machine's load moves this: say the load with the figure).

Usage: python bench/gateway_cpu.py [--requests 3000] [--stream-requests 1000]
       [--concurrency 8] [--delay-ms 0] [--pages N] [--compare ROUNDS] [--profile FILE]
Ends with `RESULT gateway_cpu_ms_per_req=.. gateway_cpu_ms_per_stream=.. requests=..
concurrency=.. delay_ms=.. load1=.. target_met=..` (with --pages, `gateway_kib_per_req=..
floor_kib_per_req=..` before `load1`; with --compare, `gateway_ms_per_req=..
floor_ms_per_req=.. parts_ms_per_req=..` there).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

TARGET_MS = 0.5
BODY = {"model": "tiny-a", "prompt": "Hello there, how are you", "max_tokens": 8}
USAGE = {"prompt_tokens": 7, "completion_tokens": 8, "total_tokens": 15}


def stub(port: int, delay_s: float) -> None:
    """The stub upstream: completions answered after `delay_s` (JSON or SSE with usage)."""
    from aiohttp import web

    answer = json.dumps(
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": "tiny-a",
            "choices": [{"index": 0, "text": " I am fine, thank you", "finish_reason": "length"}],
            "usage": USAGE,
        }
    ).encode()
    chunks = [
        b"data: " + json.dumps({"model": "tiny-a", "choices": [{"text": t}]}).encode() + b"\n\n"
        for t in (" I", " am", " fine")
    ]
    tail = b"data: " + json.dumps({"model": "tiny-a", "choices": [], "usage": USAGE}).encode()

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if delay_s:
            await asyncio.sleep(delay_s)
        if not body.get("stream"):
            return web.Response(body=answer, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for c in chunks:
            await resp.write(c)
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(tail + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def gateway(state: Path, keys: Path, port: int, upstream: int, profile: str | None) -> None:
    """The real gateway over a control that reports the stub as the one awake instance."""
    from stub_gateway import stub_gateway

    from planner.adjuster.gateway import run_forever

    gw = stub_gateway(state, keys, upstream)
    if profile is None:
        run_forever(gw, "127.0.0.1", port)
        return
    import cProfile

    prof = cProfile.Profile(time.thread_time)  # CPU, not wall: waits cost nothing
    try:
        prof.runcall(run_forever, gw, "127.0.0.1", port)
    finally:
        prof.dump_stats(profile)


def wait_up(url: str, procs: list[subprocess.Popen]) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a bench process exited before answering")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def measure(url: str, pid: int, n: int, conc: int, body: dict) -> float:
    """CPU ms of the proxy `pid` per request over `n` requests (after a warm-up); the client
    is gateway_overhead.py's, with its HEADERS."""
    from gateway_overhead import _burst

    asyncio.run(_burst(url, max(50, n // 10), conc, body))
    c0 = cpu_ns(pid)
    asyncio.run(_burst(url, n, conc, body))
    return (cpu_ns(pid) - c0) / max(n, 1) / 1e6


def cpu_ns(pid: int) -> int:
    """CPU nanoseconds of a process's threads so far (/proc schedstat: finer than ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that just ended
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total


PAUSE_S = 0.2  # before each touched-memory sample: what a request follows at C=1
SETTLE_S = 0.02  # after its answer: the proxy's work after the write (its record) counted


def referenced_kib(pid: int) -> int:
    """KiB of a process's memory referenced since its bits were last cleared."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Referenced:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/smaps_rollup has no Referenced line")


def touched_kib(url: str, pid: int, n: int, body: dict) -> float:
    """Mean KiB the proxy at `url` (process `pid`) touches in one request after a pause."""
    import httpx
    from gateway_overhead import HEADERS

    total = 0
    with httpx.Client(base_url=url, headers=HEADERS, timeout=30) as client:
        for _ in range(n):
            time.sleep(PAUSE_S)
            Path(f"/proc/{pid}/clear_refs").write_text("1")
            client.post("/v1/completions", json=body).raise_for_status()
            time.sleep(SETTLE_S)
            total += referenced_kib(pid)
    return total / max(n, 1)


def compare(urls: dict[str, tuple[str, int]], rounds: int, n: int, conc: int) -> dict[str, float]:
    """Median CPU ms per request of each proxy (name -> (url, pid)) over `rounds` rounds of
    `n` requests (`measure`'s), the order reversed every other round so drift hits all
    alike."""
    ms: dict[str, list[float]] = {name: [] for name in urls}
    for i in range(rounds):
        for name in list(urls) if i % 2 == 0 else list(reversed(urls)):
            url, pid = urls[name]
            ms[name].append(measure(url, pid, n, conc, BODY))
        print(f"round {i}: " + ", ".join(f"{k} {v[-1]:.3f} ms" for k, v in ms.items()))
    return {name: statistics.median(v) for name, v in ms.items()}


def side_by_side(
    d: Path,
    upstream: int,
    gateway: tuple[str, int],
    procs: list[subprocess.Popen],
    rounds: int,
    n: int,
    conc: int,
) -> dict[str, float]:
    """`compare` of the gateway (url, pid), the floor proxy and the floor with the gateway's
    parts (its own state in `d`/parts, the same keys), both started here (added to `procs`):
    `{name}_ms_per_req` -> median CPU ms."""
    from gateway_overhead import start_floor

    (d / "parts").mkdir()
    os.link(d / "keys.yaml", d / "parts" / "keys.yaml")
    parts_args = ("--parts", str(d / "parts" / "state"), str(d / "parts" / "keys.yaml"))
    proxies = {"gateway": gateway}
    for name, extra in (("floor", ()), ("parts", parts_args)):
        proc, url = start_floor(upstream, {}, extra)
        procs.append(proc)
        proxies[name] = (url, proc.pid)
    return {f"{k}_ms_per_req": v for k, v in compare(proxies, rounds, n, conc).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--stream-requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="the stub's answer delay")
    ap.add_argument(
        "--pages",
        type=int,
        default=0,
        metavar="N",
        help="also the KiB a request touches in the gateway and the floor proxy (N samples)",
    )
    ap.add_argument(
        "--compare",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="then the gateway, the floor proxy and the floor with the gateway's parts, "
        "ROUNDS interleaved rounds of --requests each (medians)",
    )
    ap.add_argument("--profile", default=None, help="write the gateway's cProfile stats here")
    ap.add_argument("--role", choices=["stub", "gateway"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--upstream", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "stub":
        return stub(a.port, a.delay_ms / 1e3)
    if a.role == "gateway":
        d = Path(a.dir)
        return gateway(d / "state", d / "keys.yaml", a.port, a.upstream, a.profile)

    from planner.engines.process import free_port
    from planner.keys import add_key

    with tempfile.TemporaryDirectory(prefix="gwcpu-") as tmp:
        d = Path(tmp)
        for i in range(49):
            add_key(d / "keys.yaml", f"user-{i}", models=["tiny-a"], requests_per_minute=60)
        key = add_key(
            d / "keys.yaml", "bench", requests_per_minute=10_000_000, max_concurrency=10_000
        )
        up, gw = free_port(), free_port()
        me = [sys.executable, __file__]
        stub_args = ["--role", "stub", "--port", str(up), "--delay-ms", str(a.delay_ms)]
        procs = [subprocess.Popen([*me, *stub_args])]
        prof = ["--profile", a.profile] if a.profile else []
        procs.append(
            subprocess.Popen(
                [
                    *me,
                    "--role",
                    "gateway",
                    "--dir",
                    tmp,
                    "--port",
                    str(gw),
                    "--upstream",
                    str(up),
                    *prof,
                ],
                stderr=subprocess.DEVNULL,
            )
        )
        url = f"http://127.0.0.1:{gw}"
        try:
            wait_up(url, procs)
            from gateway_overhead import HEADERS

            HEADERS["Authorization"] = f"Bearer {key}"
            ms = measure(url, procs[1].pid, a.requests, a.concurrency, BODY)
            stream = {**BODY, "stream": True}
            ms_s = measure(url, procs[1].pid, a.stream_requests, a.concurrency, stream)
            touched = {}
            compared = {}
            if a.pages:
                from gateway_overhead import start_floor

                floor, floor_url = start_floor(up, {})
                procs.append(floor)
                touched["gateway_kib_per_req"] = touched_kib(url, procs[1].pid, a.pages, BODY)
                touched["floor_kib_per_req"] = touched_kib(floor_url, floor.pid, a.pages, BODY)
            if a.compare:
                measured = (url, procs[1].pid)
                compared = side_by_side(
                    d, up, measured, procs, a.compare, a.requests, a.concurrency
                )
        finally:
            for p in reversed(procs):
                p.terminate()
                p.wait(30)
    load1 = os.getloadavg()[0]
    print(
        f"gateway CPU per request: {ms:.3f} ms (streamed: {ms_s:.3f} ms), stub delay "
        f"{a.delay_ms:g} ms, load {load1:.2f}"
    )
    if compared:
        print(
            f"median CPU per request over {a.compare} rounds: gateway "
            f"{compared['gateway_ms_per_req']:.3f} ms, floor with the gateway's parts "
            f"{compared['parts_ms_per_req']:.3f} ms, floor {compared['floor_ms_per_req']:.3f} ms"
        )
    if touched:
        print(
            f"memory touched per request after a {PAUSE_S:g} s pause ({a.pages} samples): "
            f"gateway {touched['gateway_kib_per_req']:.0f} KiB, "
            f"floor proxy {touched['floor_kib_per_req']:.0f} KiB"
        )
    result = {
        "gateway_cpu_ms_per_req": f"{ms:.3f}",
        "gateway_cpu_ms_per_stream": f"{ms_s:.3f}",
        "requests": a.requests,
        "concurrency": a.concurrency,
        "delay_ms": f"{a.delay_ms:g}",
        **{k: f"{v:.0f}" for k, v in touched.items()},
        **{k: f"{v:.3f}" for k, v in compared.items()},
        "load1": f"{load1:.2f}",
        "target_met": str(ms <= TARGET_MS).lower(),
    }
    print("RESULT " + " ".join(f"{k}={v}" for k, v in result.items()))
    sys.exit(0 if ms <= TARGET_MS else 1)


if __name__ == "__main__":
    main()
