"""The gateway under faults (issues 29 and 43): does a normal request still get through, and
fast? Does the relay close what the gateway closes?

`planner`'s Gateway runs in its own process (its open-file limit set to `--nofile`, soft and
hard, as a small server's would be), over stub engines (bench/lib/stub_engines.py: the
subject is the gateway, not the engine; a wake takes `--wake-s`). Its state dir, and so its
request log, is a 2 MiB tmpfs when `mount -t tmpfs` works here (root), else a plain dir whose
log file's size limit (RLIMIT_FSIZE, set with prlimit) stands in for a full disk. All
traffic is on loopback. Split: this machine, loopback, stub engines.

Attacks, one after another; during each, a "normal" request (a new connection, to a
gpu-tier model) is sent every ~0.3 s and its latency kept:
1. slow: 100 clients sending headers at 1 byte/s and 50 sending a body at 1 byte/s (the
   gateway runs with 5 s header/body timeouts here; nginx's 60 s are the defaults); all
   must be closed by the gateway within the timeouts plus 3 s.
2. half_open: `--half-open` connections (1,100) that send half a request line and wait,
   under the open-file limit (1,024).
3. full_disk: the request log's disk is filled, 600 requests are answered, the disk freed;
   rows lost = requests not in the log; all must be counted in /metrics (dropped) or 0.
4. malformed: 100,000-deep JSON, `"stream": "false"`, a non-object `stream_options`, not
   JSON, 10 MB model names, and four 60 MB bodies, all at once.
5. thrash: one client alternating two host-tier models that cannot be awake together
   (one GPU), 20 requests 0.25 s apart without waiting for answers; wakes counted.
Then a second gateway, with a keys file (issue 43); the normal request carries its valid key:
6. quiet: the valid key's latency alone for 6 s (the reference).
7. chunk_flood: 110 keyless connections, each a chunked POST of 1-byte chunks at ~64 KiB/s,
   reconnecting when closed, for 10 s; the gateway's CPU seconds meanwhile are printed.
8. big_bodies: 20 concurrent 15 MiB bodies with the valid key, each retried after its
   Retry-After while the gateway answers 503 (its body budget).
Then the relay (adjuster/backends/relay.py, in this process, on 127.0.0.2, a 5 s header
timeout, `--relay-timeout-s`):
9. relay: 300 half-open connections and 50 slowloris clients (a header byte a second).

Priority: the normal requests' prober and the first gateway (attacks 1-5, whose target is an
absolute worst latency) run at nice `PRIORITY` (-5) where this host permits it (root); the
attack clients (this process) and the keyed gateway keep the default. The attack clients
would run on other hosts, and on a shared 2-CPU machine other work does too: at the default
priority their CPU use, not the gateway, set the worst latency (the baseline's worst, no
attack, was 0.39 s at load 13). What each attack sends is fixed (every body is sent, every
client connects), so the gateway does all the work it did; a gateway that blocks its loop
(a parse, a copy) still shows in full. The keyed attacks' targets are a ratio of P50s taken
by the same prober, and their gateway keeps the default priority, so the flood's clients are
not slowed against it. `--no-priority` runs all at the default (RESULT: priority=0).

Targets (exit 1 when missed): the normal request's worst latency <= 1 s during attacks 1-5;
log rows lost and not counted = 0; wakes in the thrash <= 4 for 20 requests; every slow
client closed; SIGTERM exits 0 (both gateways); the valid key's P50 during the flood <= 2x
its quiet P50; the peak RSS (VmHWM) of the keyed gateway <= 400 MiB after the big bodies,
all 20 answered (the stub engine answers bodies over 1 MiB with 413); every relay client
closed, none later than the header timeout plus 1.5 s (the guard sweeps once a second; this
bench polls its 350 sockets every 0.2 s). The first gateway's peak RSS and stderr size are
printed.

Usage: python bench/gateway_faults.py [--half-open 1100] [--nofile 1024] [--wake-s 1.0]
       [--relay-timeout-s 5] [--skip-earlier] [--no-priority]
(`--skip-earlier`: attacks 6-9 only; RESULT then says earlier=skipped, not the full check.)
Ends with `RESULT split=loopback-stub-engines latency_s_slow=.. latency_s_half_open=..
latency_s_full_disk=.. latency_s_malformed=.. latency_s_thrash=.. log_rows_lost=..
log_rows_uncounted=.. thrash_wakes=.. slow_clients_open=.. gateway_peak_rss_mib=..
gateway_stderr_kib=.. sigterm_rc=.. disk=.. quiet_p50_ms=.. flood_p50_ms=.. flood_p50_ratio=..
flood_connections=.. flood_gateway_cpu_s=.. flood_s=.. big_bodies_peak_rss_mib=..
big_bodies_answered=.. keyed_sigterm_rc=.. relay_open_after=.. relay_max_close_s=..
relay_header_timeout_s=.. priority=.. earlier=run target_met=..`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

MARK = "fault-bench-" + "u" * 188  # X-User of the full-disk requests (200 characters)
KEY_ENV = "PLANNER_FAULT_BENCH_KEY"  # the valid key of the keyed attacks, for the probe
PRIORITY = -5  # nice of the prober and the first gateway (module docstring, "Priority")
PRIORITY_ENV = "PLANNER_FAULT_BENCH_NICE"  # the prober's nice, from the bench (0: default)


def set_priority(nice: int) -> None:
    """Run this process (its threads made after this) at `nice`, where the host permits it
    (root; else it stays at the default: main() says which)."""
    if nice != 0:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, nice)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- the gateway


def serve(cfg_path: str) -> None:
    """The gateway process (`--serve CFG`): stub engines, the real Gateway."""
    import logging

    from stub_engines import StubControl

    from planner.adjuster.gateway import Gateway, GatewayConfig, run_forever
    from planner.schemas.plan import Point

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    cfg = json.loads(Path(cfg_path).read_text())
    point = Point(**cfg["point"])
    control = StubControl(point, cfg["wake_s"])
    auth = None
    if cfg.get("keys"):
        from planner.adjuster.gateway.auth import Auth

        models = sorted({i.model for i in point.instances})
        auth = Auth.open(cfg["state_dir"], cfg["keys"], model_names=models)
    gw = Gateway(
        point, control, state_dir=cfg["state_dir"], config=GatewayConfig(**cfg["gw"]), auth=auth
    )
    run_forever(gw, "127.0.0.1", cfg["port"])
    control.close()


def _instance(iid: str, model: str, gpu: int, tier: str) -> dict:
    return {
        "id": iid,
        "model": model,
        "variant": "bf16",
        "node": "n1",
        "gpus": [gpu],
        "tp": 1,
        "tier": tier,
        "port": free_port(),
        "memory_gib": {"weights": 1.0, "kv": 1.0, "overhead": 0.5},
    }


def start_gateway(
    work: Path, state_dir: Path, args: argparse.Namespace, keys: Path | None = None, nice: int = 0
) -> tuple:
    port = free_port()
    cfg = {
        "port": port,
        "keys": str(keys) if keys is not None else None,
        "state_dir": str(state_dir),
        "wake_s": args.wake_s,
        "point": {
            "name": "bench",
            "instances": [
                _instance("a0", "a", 0, "host"),
                _instance("b0", "b", 0, "host"),  # a and b: one GPU, one awake at a time
                _instance("c0", "c", 1, "gpu"),  # the normal requests' model
            ],
        },
        "gw": {"header_timeout_s": 5.0, "body_timeout_s": 5.0, "log_flush_s": 0.2},
    }
    name = "gw-keys" if keys is not None else "gw"
    (work / f"{name}.json").write_text(json.dumps(cfg))
    nofile = args.nofile

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a size limit is an error, not a kill
        set_priority(nice)

    err = open(work / f"{name}.stderr", "wb")  # noqa: SIM115 (the child's, closed at the end)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(work / f"{name}.json")],
        stdout=subprocess.DEVNULL,
        stderr=err,
        preexec_fn=limits,
    )
    import httpx

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if _get(url + "/health", 2)[0] == 200:
                return proc, url, err
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(
                f"the gateway did not start: {(work / f'{name}.stderr').read_text()}"
            )
        time.sleep(0.2)


def _get(url: str, timeout_s: float) -> tuple[int, str]:
    import httpx

    r = httpx.get(url, timeout=timeout_s)
    return r.status_code, r.text


def normal(url: str, user: str = "normal") -> float:
    """One normal request on a new connection: its latency (inf when it failed). With
    `KEY_ENV` set (never on argv), it carries that key."""
    import httpx

    headers = {"X-User": user}
    if os.environ.get(KEY_ENV):
        headers["Authorization"] = f"Bearer {os.environ[KEY_ENV]}"
    t = time.perf_counter()
    try:
        r = httpx.post(
            url + "/v1/completions",
            json={"model": "c", "prompt": "hi"},
            headers=headers,
            timeout=10,
        )
    except httpx.HTTPError:
        return float("inf")
    return time.perf_counter() - t if r.status_code == 200 else float("inf")


class Prober:
    """Normal requests every ~0.3 s from a process of their own (the attack's client threads
    must not slow the measurement through this process's GIL); the worst latency."""

    def __init__(self, url: str):
        self.url, self.lat = url, []

    def __enter__(self) -> Prober:
        self._proc = subprocess.Popen(
            [sys.executable, __file__, "--probe", self.url], stdout=subprocess.PIPE, text=True
        )
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.5)  # at least one probe
        self._proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self._proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            out, _ = self._proc.communicate()
        self.lat = [float(x) for x in out.split()]

    @property
    def worst_s(self) -> float:
        return max(self.lat) if self.lat else float("inf")

    @property
    def p50_s(self) -> float:
        return sorted(self.lat)[len(self.lat) // 2] if self.lat else float("inf")


def probe(url: str) -> None:
    """`--probe URL`: a normal request every ~0.3 s, its latency printed, until SIGTERM.
    The handler is installed here, as a flag the loop reads: started from a background
    job the process inherits SIGINT ignored, and an exception raised inside the HTTP
    client could be swallowed (either way the bench waited on its probe for ever)."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    set_priority(int(os.environ.get(PRIORITY_ENV, "0")))
    while not stop:
        print(normal(url), flush=True)
        time.sleep(0.3)


def metric(url: str, name: str) -> float:
    text = _get(url + "/metrics", 10)[1]
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


# ----------------------------------------------------------------------------- attacks


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def attack_slow(url: str) -> dict:
    heads = [_connect(url) for _ in range(100)]
    bodies = [_connect(url) for _ in range(50)]
    for s in bodies:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
    line = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 100
    open_ = {id(s): s for s in heads + bodies}
    with Prober(url) as p:
        for k in range(8 + 3):  # the 5 s timeouts, plus 3 s, plus slack
            for s in list(open_.values()):
                try:
                    s.sendall(line[k : k + 1] if s in heads else b"x")
                except OSError:
                    open_.pop(id(s))
            time.sleep(1.0)
    still = {"heads": 0, "bodies": 0}
    for s in open_.values():  # a closed one reads b"" (or an answer, then b"")
        s.settimeout(0.5)
        try:
            data = s.recv(65536)
            gone = not data or b" 408 " in data
        except TimeoutError:
            gone = False
        except OSError:
            gone = True
        still["heads" if s in heads else "bodies"] += not gone
    for s in heads + bodies:
        s.close()
    return {"latency_s": p.worst_s, "slow_open": sum(still.values()), **still}


def attack_half_open(url: str, n: int) -> dict:
    socks, failed = [], 0
    with Prober(url) as p:
        for _ in range(n):
            try:
                s = _connect(url)
                s.sendall(b"POST /v1/comp")
                socks.append(s)
            except OSError:
                failed += 1
        time.sleep(3.0)
    for s in socks:
        s.close()
    return {"latency_s": p.worst_s, "connect_failed": failed}


def fill(path: Path) -> Path:
    filler = path / "filler"
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    return filler


def attack_full_disk(url: str, state: Path, proc: subprocess.Popen, disk: str) -> dict:
    n = 600
    if disk == "tmpfs":
        filler = fill(state)
    else:  # the log file may not grow: SQLite gets EFBIG as it would ENOSPC
        size = sum(f.stat().st_size for f in state.glob("requests.sqlite*"))
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    with Prober(url) as p:  # one client at a time: the fault is the disk, not the load
        lat = sorted(normal(url, MARK) for _ in range(n))
    failures = metric(url, "planner_gateway_log_write_failures_total")
    if disk == "tmpfs":
        filler.unlink()
    else:
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (-1, -1))
    deadline = time.monotonic() + 30
    while metric(url, "planner_gateway_log_rows_pending") > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    con = sqlite3.connect(f"file:{state / 'requests.sqlite'}?mode=ro", uri=True)
    rows = con.execute("SELECT COUNT(*) FROM requests WHERE user = ?", (MARK,)).fetchone()[0]
    con.close()
    dropped = metric(url, "planner_gateway_log_rows_dropped_total")
    lost = n - rows
    return {
        "latency_s": p.worst_s,
        "logged_p50_s": lat[n // 2],
        "logged_failed": sum(x == float("inf") for x in lat),
        "write_failures": failures,
        "lost": lost,
        "uncounted": max(0, lost - int(dropped)),
    }


def attack_malformed(url: str) -> dict:
    import httpx

    deep = b"[" * 100_000 + b"]" * 100_000
    bodies = (
        [deep] * 20
        + [json.dumps({"model": "c", "prompt": "x", "stream": "false"}).encode()] * 20
        + [json.dumps({"model": "c", "stream": True, "stream_options": 3}).encode()] * 20
        + [b"{not json"] * 20
        + [json.dumps({"model": "m" * 10_000_000, "prompt": "x"}).encode()] * 3
        + [b'{"model": "c", "prompt": "' + b"x" * (60 * 1024 * 1024) + b'"}'] * 4
    )

    def send(body: bytes) -> int:
        try:
            r = httpx.post(url + "/v1/completions", content=body, timeout=60)
            ok = r.headers.get("content-type", "").startswith("application/json")
            return r.status_code if ok else -r.status_code
        except httpx.HTTPError:
            return 0  # refused mid-upload (413 before the body was read): fine

    with Prober(url) as p, ThreadPoolExecutor(4) as ex:
        codes = list(ex.map(send, bodies))
    bad = [c for c in codes if c not in (0, 400, 404, 413)]
    return {"latency_s": p.worst_s, "not_4xx_json": len(bad)}


def attack_thrash(url: str) -> dict:
    import httpx

    before = metric(url, "planner_gateway_wakes_total")

    def ask(model: str) -> int:
        r = httpx.post(url + "/v1/completions", json={"model": model, "prompt": "x"}, timeout=120)
        return r.status_code

    with Prober(url) as p, ThreadPoolExecutor(20) as ex:
        futs = []
        for k in range(20):
            futs.append(ex.submit(ask, "ab"[k % 2]))
            time.sleep(0.25)
        codes = [f.result() for f in futs]
    return {
        "latency_s": p.worst_s,
        "wakes": metric(url, "planner_gateway_wakes_total") - before,
        "ok": sum(c == 200 for c in codes),
    }


# ----------------------------------------------------------------------------- keyed attacks


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def attack_quiet(url: str, seconds: float = 6.0) -> dict:
    """The valid key's latency with nothing else going on: the flood's reference."""
    with Prober(url) as p:
        time.sleep(seconds)
    return {"p50_s": p.p50_s, "latency_s": p.worst_s}


def _flood(s: socket.socket, head: bytes, burst: bytes, stop: threading.Event, seen: dict) -> None:
    """Send `burst` every 0.1 s on the connection after `head`, counting the 401 answers
    in `seen`, until `stop` is set or the gateway closes it."""
    try:
        s.sendall(head)
        while not stop.is_set():
            s.sendall(burst)
            with contextlib.suppress(BlockingIOError):
                got = s.recv(4096, socket.MSG_DONTWAIT)
                if not got:
                    break
                seen["answers_401"] += got.startswith(b"HTTP/1.1 401 ")
            time.sleep(0.1)
    except OSError:
        pass  # closed by the gateway: connect again


def attack_chunk_flood(url: str, pid: int, n: int = 110, seconds: float = 10.0) -> dict:
    """`n` keyless connections, each sending a chunked POST of 1-byte chunks at about
    64 KiB/s (about 11,000 chunks a second each, 7 MB/s in all), reconnecting when closed,
    for `seconds`; the valid key's requests are timed meanwhile."""
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    burst = b"1\r\nx\r\n" * 1092  # 6.4 KiB of 1-byte chunks, every 0.1 s
    stop = threading.Event()
    seen = {"connections": 0, "answers_401": 0}

    def client() -> None:
        while not stop.is_set():
            try:
                s = _connect(url)
            except OSError:
                time.sleep(0.1)
                continue
            seen["connections"] += 1
            with s:
                _flood(s, head, burst, stop, seen)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(n)]
    cpu0 = cpu_s(pid)
    with Prober(url) as p:
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
    for t in threads:
        t.join(10)
    return {
        "p50_s": p.p50_s,
        "latency_s": p.worst_s,
        "gateway_cpu_s": cpu_s(pid) - cpu0,
        "seconds": seconds,
        **seen,
    }


def attack_big_bodies(url: str, key: str, pid: int, n: int = 20, mib: int = 15) -> dict:
    """`n` concurrent requests of a `mib` MiB body with the valid key, each retried after
    its Retry-After while the gateway answers 503 (its body budget); the gateway's peak RSS
    after. (The stub engine refuses bodies over 1 MiB with 413: the subject is the gateway's
    memory, which holds, parses and forwards every byte before that answer.)"""
    import httpx

    body = b'{"model": "c", "prompt": "' + b"x" * (mib * 2**20 - 30) + b'"}'
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def send(_: int) -> tuple[int, int]:
        for tries in range(1, 121):
            try:
                r = httpx.post(url + "/v1/completions", content=body, headers=headers, timeout=60)
            except httpx.HTTPError:
                return 0, tries
            if r.status_code != 503:
                return r.status_code, tries
            time.sleep(float(r.headers.get("Retry-After", "1")))
        return 503, tries

    rss0 = rss_mib(pid)
    with Prober(url) as p, ThreadPoolExecutor(n) as ex:
        got = list(ex.map(send, range(n)))
    codes = [c for c, _ in got]
    return {
        "latency_s": p.worst_s,
        "rss_before_mib": rss0,
        "peak_rss_mib": peak_rss_mib(pid),
        "answered": sum(c not in (0, 503) for c in codes),
        "statuses": sorted(set(codes)),
        "tries": sum(t for _, t in got),
    }


def attack_relay(timeout_s: float, half_open: int = 300, slow: int = 50) -> dict:
    """The relay (adjuster/backends/relay.py, in this process, on 127.0.0.2) with a
    `timeout_s` header timeout: `half_open` connections that send half a request line and
    wait, and `slow` that send a header byte a second; each one's time from its first byte
    to its close by the relay."""
    import secrets

    from planner.adjuster.backends.relay import Relay
    from planner.adjuster.gateway.config import GatewayConfig

    port = free_port()
    relay = Relay("127.0.0.2", GatewayConfig(header_timeout_s=timeout_s))
    relay.open(port, secrets.token_urlsafe(24))
    line = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 100
    socks: dict[socket.socket, float] = {}  # -> the time of its first byte
    slow_ones: set[socket.socket] = set()
    closed: dict[socket.socket, float] = {}
    try:
        for k in range(half_open + slow):
            s = socket.create_connection(("127.0.0.2", port), timeout=10)
            s.sendall(b"POST /v1/comp" if k < half_open else line[:1])
            socks[s] = time.monotonic()
            if k >= half_open:
                slow_ones.add(s)
        deadline = time.monotonic() + timeout_s + 10
        tick = 0
        while len(closed) < len(socks) and time.monotonic() < deadline:
            tick += 1
            sent = line[tick // 5 : tick // 5 + 1] if tick % 5 == 0 else b""  # a byte a second
            for s in socks:
                if s in closed:
                    continue
                try:
                    if not s.recv(4096, socket.MSG_DONTWAIT):
                        closed[s] = time.monotonic()
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    closed[s] = time.monotonic()
                    continue
                if sent and s in slow_ones:
                    with contextlib.suppress(OSError):
                        s.sendall(sent)
            time.sleep(0.2)
    finally:
        for s in socks:
            s.close()
        relay.close(port)
    took = [closed[s] - t for s, t in socks.items() if s in closed]
    return {
        "open_after": len(socks) - len(closed),
        "max_close_s": max(took) if took else float("inf"),
        "timeout_s": timeout_s,
    }


# ----------------------------------------------------------------------------- main


def mount_tmpfs(path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(path)],
        capture_output=True,
    )
    return r.returncode == 0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    ap.add_argument("--half-open", type=int, default=1100)
    ap.add_argument("--nofile", type=int, default=1024)
    ap.add_argument("--wake-s", type=float, default=1.0)
    ap.add_argument("--relay-timeout-s", type=float, default=5.0, help="the relay's header timeout")
    ap.add_argument(
        "--skip-earlier",
        action="store_true",
        help="only issue 43's attacks (RESULT says earlier=skipped: not the full check)",
    )
    ap.add_argument(
        "--no-priority", action="store_true", help="the prober and gateway at the default nice"
    )
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    if args.probe:
        probe(args.probe)
        return 0
    work = Path(tempfile.mkdtemp(prefix="gw-faults-"))
    # permitted here? (tried on a child, so this process, the attack clients', keeps its own)
    try_nice = [sys.executable, "-c", f"import os; os.setpriority(os.PRIO_PROCESS, 0, {PRIORITY})"]
    raised = not args.no_priority and subprocess.run(try_nice, capture_output=True).returncode == 0
    args.nice = PRIORITY if raised else 0
    os.environ[PRIORITY_ENV] = str(args.nice)  # the prober's (it runs as a child)
    print(f"prober and first gateway at nice {args.nice}", flush=True)
    res: dict[str, dict] = {}
    checks = [] if args.skip_earlier else [earlier_attacks(work, args, res)]
    checks.append(keyed_attacks(work, args, res))
    met = all(ok for ok, _ in checks)
    parts = ["RESULT split=loopback-stub-engines", *(line for _, line in checks)]
    relay = res["relay"] = attack_relay(args.relay_timeout_s)
    print(f"relay: {relay}", flush=True)
    # closed by the header timeout: within it plus the guard's sweep period (1 s) and this
    # bench's polling of its sockets (0.2 s a round of 350, under load: 0.5 s)
    ok = relay["open_after"] == 0 and relay["max_close_s"] <= relay["timeout_s"] + 1.5
    met = met and ok
    parts.append(
        f"relay_open_after={relay['open_after']} relay_max_close_s={relay['max_close_s']:.2f}"
        f" relay_header_timeout_s={relay['timeout_s']:g} priority={args.nice}"
        f" earlier={'skipped' if args.skip_earlier else 'run'} target_met={met}"
    )
    print(" ".join(parts))
    return 0 if met else 1


def earlier_attacks(work: Path, args: argparse.Namespace, res: dict) -> tuple[bool, str]:
    """Issue 29's attacks on a gateway without keys: (targets met, RESULT fields)."""
    state = work / "state"
    disk = "tmpfs" if mount_tmpfs(state) else "fsize"
    state.mkdir(exist_ok=True)
    try:
        proc, url, err = start_gateway(work, state, args, nice=args.nice)
    except RuntimeError:
        if disk == "tmpfs":
            subprocess.run(["umount", str(state)], check=False)
        raise
    try:
        base = [normal(url) for _ in range(20)]
        print(
            f"baseline normal request: worst {max(base) * 1e3:.1f} ms; load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared: figures are noisy)",
            flush=True,
        )
        for name, fn in (
            ("slow", lambda: attack_slow(url)),
            ("half_open", lambda: attack_half_open(url, args.half_open)),
            ("full_disk", lambda: attack_full_disk(url, state, proc, disk)),
            ("malformed", lambda: attack_malformed(url)),
            ("thrash", lambda: attack_thrash(url)),
        ):
            res[name] = fn()
            print(f"{name}: {res[name]}", flush=True)
        rss = peak_rss_mib(proc.pid)
    finally:
        rc = stop_gateway(proc, err)
        if disk == "tmpfs":
            subprocess.run(["umount", str(state)], check=False)
    stderr_kib = (work / "gw.stderr").stat().st_size / 1024
    lat = {
        k: res[k]["latency_s"] for k in ("slow", "half_open", "full_disk", "malformed", "thrash")
    }
    fd = res["full_disk"]
    met = (
        all(v <= 1.0 for v in lat.values())
        and fd["uncounted"] == 0
        and res["thrash"]["wakes"] <= 4
        and res["thrash"]["ok"] == 20
        and res["slow"]["slow_open"] == 0
        and res["malformed"]["not_4xx_json"] == 0
        and rc == 0
    )
    line = (
        " ".join(f"latency_s_{k}={v:.3f}" for k, v in lat.items())
        + f" log_rows_lost={fd['lost']} log_rows_uncounted={fd['uncounted']}"
        f" log_write_failures={int(fd['write_failures'])}"
        f" thrash_wakes={int(res['thrash']['wakes'])} thrash_requests=20"
        f" slow_clients_open={res['slow']['slow_open']}"
        f" gateway_peak_rss_mib={rss:.0f} gateway_stderr_kib={stderr_kib:.1f}"
        f" sigterm_rc={rc} disk={disk}"
    )
    return met, line


def keyed_attacks(work: Path, args: argparse.Namespace, res: dict) -> tuple[bool, str]:
    """Issue 43's attacks on a gateway with keys: the keyless chunk flood against a valid
    key's latency, then 20 concurrent 15 MiB bodies against its peak RSS."""
    from planner.keys import add_key

    keys = work / "keys.yaml"
    key = add_key(keys, "bench", requests_per_minute=10_000_000, max_concurrency=10_000)
    os.environ[KEY_ENV] = key  # the probes' key (their environment, never argv)
    state = work / "state-keys"
    state.mkdir()
    proc, url, err = start_gateway(work, state, args, keys)
    try:
        res["quiet"] = attack_quiet(url)
        print(f"quiet (valid key): {res['quiet']}", flush=True)
        res["chunk_flood"] = attack_chunk_flood(url, proc.pid)
        print(f"chunk_flood: {res['chunk_flood']}", flush=True)
        res["big_bodies"] = attack_big_bodies(url, key, proc.pid)
        print(f"big_bodies: {res['big_bodies']}", flush=True)
    finally:
        rc = stop_gateway(proc, err)
        del os.environ[KEY_ENV]
    quiet = res["quiet"]
    flood = res["chunk_flood"]
    big = res["big_bodies"]
    ratio = flood["p50_s"] / quiet["p50_s"]
    met = ratio <= 2.0 and big["peak_rss_mib"] <= 400 and big["answered"] == 20 and rc == 0
    line = (
        f"quiet_p50_ms={quiet['p50_s'] * 1e3:.1f} flood_p50_ms={flood['p50_s'] * 1e3:.1f}"
        f" flood_p50_ratio={ratio:.2f} flood_connections={flood['connections']}"
        f" flood_gateway_cpu_s={flood['gateway_cpu_s']:.1f} flood_s={flood['seconds']:g}"
        f" big_bodies_peak_rss_mib={big['peak_rss_mib']:.0f}"
        f" big_bodies_answered={big['answered']} keyed_sigterm_rc={rc}"
    )
    return met, line


def stop_gateway(proc: subprocess.Popen, err: Any) -> int:
    """SIGTERM, its exit code (-9: killed after 60 s)."""
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = -9
    err.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
