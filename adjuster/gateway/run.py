"""Running the gateway: `serve` (listen, start, stop and drain), `run_forever` (the CLI:
signals), `GatewayThread` (tests and benches: its own loop in a thread)."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
from typing import Any

from planner.adjuster.gateway.auth import check_bind
from planner.adjuster.gateway.guard import connection_cap, raise_open_file_limit
from planner.adjuster.gateway.h1server import loop_factory
from planner.adjuster.gateway.server import Gateway
from planner.errors import InputError


async def serve(
    gateway: Gateway, host: str, port: int, stop: asyncio.Event, ready: Any = None
) -> None:
    """Run the gateway until `stop` is set; then finish in-flight requests and close.

    A client that disconnects cancels its request's handler (h1server.py), which closes the
    upstream request (vLLM aborts it) instead of generating for nobody.
    A non-loopback `host` without keys is refused (auth.check_bind) before anything starts.
    """
    check_bind(host, gateway.auth.table is not None, gateway.auth.insecure)
    cfg = gateway.cfg
    gateway.guard.cap = connection_cap(cfg.max_connections, raise_open_file_limit())
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(gateway.guard.loop_errors)
    server = gateway.server()
    listener: asyncio.Server | None = None
    try:
        try:
            listener = await loop.create_server(
                server, host, port, backlog=1024, reuse_address=True, family=socket.AF_UNSPEC
            )
        except OSError as e:
            raise port_error(host, port, e) from None
        await gateway.start()
        if ready is not None:
            ready()
        await stop.wait()
    finally:  # also after a failed bind: the logs the Gateway opened are closed
        if listener is not None:
            listener.close()  # no new connections
        await server.shutdown(cfg.shutdown_timeout_s)  # in-flight requests end first
        await gateway.close()


def port_error(host: str, port: int, e: OSError) -> InputError:
    """A port the gateway cannot listen on, with the fix (exit 2)."""
    if e.errno == errno.EADDRINUSE:
        why, fix = (
            "is in use",
            f"stop what listens there (`ss -ltnp 'sport = :{port}'`) or pass another --port",
        )
    elif e.errno == errno.EACCES:
        why, fix = "needs privileges", "use a port above 1023"
    else:
        why, fix = f"cannot be listened on ({e.strerror})", "pass another --host or --port"
    return InputError(f"{host}:{port} {why}", path="--port", fix=fix)


class GatewayThread:
    """The gateway on its own event loop in a thread (tests and benches)."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 8000):
        self.gateway = gateway
        self.host = host
        self.port = port
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="gateway", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve(self.gateway, self.host, self.port, self._stop, self._ready.set)

        try:
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                runner.run(main())
        except BaseException as e:
            self._error = e
        finally:
            self._ready.set()

    def start(self, timeout_s: float = 30.0) -> GatewayThread:
        self._thread.start()
        self._ready.wait(timeout_s)
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)

    def call(self, coro: Any, timeout_s: float = 60.0) -> Any:
        """Run a coroutine on the gateway's loop (e.g. `gateway.refresh()`)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)


def run_forever(gateway: Gateway, host: str, port: int, ready: Any = None) -> None:
    """Serve until SIGTERM/SIGINT; then drain in-flight requests and close (the CLI;
    `ready()` once it listens). SIGHUP re-reads the keys file."""
    import signal

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, gateway.auth.reload)
        await serve(gateway, host, port, stop, ready)

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main())
