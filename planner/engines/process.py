"""Starting, watching and stopping one engine server: engine-agnostic process handling.

The server runs in its own process group with its output in a log file; readiness polls the
engine's ready route; a launch that fails is classified from the log by the engine
(`Engine.classify_failure`); stop reaches the whole group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from planner.control_http import answers_ok
from planner.engines.download import DownloadWatch
from planner.engines.ports import PortHolder, owns_port, port_held_error, port_holder
from planner.errors import LaunchError
from planner.private import open_private_append
from planner.torch_addons import ENGINE_SITE_DIR

if TYPE_CHECKING:
    from planner.engines.base import Engine


_HANDED_OUT: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (bind to 0 and release), never one handed out before.

    The kernel may give the same free port to two binds in a row; callers that take several
    ports before binding any (a plan's instances) need them distinct.
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def new_secret() -> str:
    """A fresh random API key for one instance (256 bits)."""
    import secrets

    return secrets.token_urlsafe(32)


_MARK = "PLANNER_ENGINE_LOG"


def start_server(
    argv: list[str], env: dict[str, str], log_path: str | Path
) -> subprocess.Popen[bytes]:
    """Spawn the server in its own process group (so stop reaches the engine children)."""
    full_env = {**os.environ, **env, _MARK: str(Path(log_path).resolve())}
    if "CUDA_VISIBLE_DEVICES" not in env:
        full_env.pop("CUDA_VISIBLE_DEVICES", None)
    # its start-up hook hides torch add-ons that cannot load (planner/torch_addons.py)
    paths = [str(ENGINE_SITE_DIR), *filter(None, [full_env.get("PYTHONPATH")])]
    full_env["PYTHONPATH"] = os.pathsep.join(paths)
    with open_private_append(log_path) as f:  # engine logs name users' models: 0600
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )


def is_same_instance(holder: PortHolder, log_path: str | Path) -> bool:
    """Whether the port's holder is an earlier server of the instance that logs to `log_path`
    (one this host's planner started and lost track of); False when its environment cannot
    be read."""
    import psutil

    if holder.pid is None:
        return False
    try:
        env = psutil.Process(holder.pid).environ()
    except psutil.Error:
        return False
    return bool(env.get(_MARK) == str(Path(log_path).resolve()))


# psutil derives a start time from the boot time (whole seconds) and clock ticks: it may
# read up to about a second late
_CREATE_TIME_SLACK_S = 2.0


def pid_alive(pid: int, *, running_at: float | None = None) -> bool:
    """Whether `pid` runs on this host (a zombie counts as dead).

    `running_at`: epoch seconds at which the process meant was already running (when it took
    a lease, say). A process with that pid created later is another one that reused the pid,
    and counts as dead.
    """
    import psutil

    if pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return running_at is None or proc.create_time() <= running_at + _CREATE_TIME_SLACK_S
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # another user's process: it exists


def pid_is_server(pid: int, port: int, marker: str) -> bool:
    """Whether `pid` is live and its command line names `marker` (the engine's
    `process_marker`) and `port`: guards against reused pids."""
    import psutil

    if not pid_alive(pid):
        return False
    try:
        args = psutil.Process(pid).cmdline()
    except psutil.AccessDenied:
        return True  # cannot read it: trust the pid
    except psutil.NoSuchProcess:
        return False  # exited since, or a zombie now
    return any(marker in a for a in args) and str(port) in args


_CLASSIFY_BYTES = 1_000_000  # how much of a failed start's log is searched for its cause


def read_tail(log_path: str | Path, max_bytes: int = 64_000) -> str:
    """The end of a log file ('' if absent)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def wait_ready(
    engine: Engine,
    host: str,
    port: int,
    proc: subprocess.Popen[bytes] | int | None,
    log_path: str | Path,
    timeout_s: float,
    *,
    poll_s: float = 0.5,
    secret: str = "",
    download_dir: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> float:
    """Block until the engine's ready route answers; returns the seconds waited.

    `download_dir`: the hub cache folder the server fills when it downloads its weights
    (planner/engines/download.py): while it grows, the time is not counted against
    `timeout_s`, and `progress` gets a line every few seconds saying how much has arrived.

    Ready means: the process `proc` runs, the route answers, and the listener on the port is
    that process or one of its session (a foreign server answering there raises
    PortHeldError, as does a start that died because the port was taken). Raises LaunchError
    with the reason the engine reads from the log when the process exits first, or reason
    `timeout` when `timeout_s` passes (the caller stops the process).
    """
    t0 = last = time.monotonic()
    counted = 0.0  # seconds counted against timeout_s: not those a download grew in
    watch = DownloadWatch(Path(download_dir)) if download_dir else None
    name = engine.display_name
    pid = proc if isinstance(proc, int) else proc.pid if proc is not None else None
    while True:
        # ready only when our own process answers: a foreign server on the port answers too
        if _running(proc) and answers_ok(host, port, engine.ready_route, secret=secret):
            if pid is None or owns_port(pid, port) is not False:
                return time.monotonic() - t0
            holder = port_holder(port, host)
            if holder is not None:
                raise port_held_error(holder, read_tail(log_path))
        if not _running(proc):
            tail = read_tail(log_path)
            # the cause may sit before a long traceback: classify a larger share of the log
            reason = engine.classify_failure(read_tail(log_path, _CLASSIFY_BYTES))
            holder = port_holder(port, host) if reason == "port_in_use" else None
            if holder is not None:
                raise port_held_error(holder, tail)
            raise LaunchError(
                f"{name} server on {host}:{port} exited during start-up ({reason}); log: {log_path}",
                reason=reason,
                log_tail=_last_lines(tail, 30),
                fix=engine.failure_fix(reason),
            )
        now = time.monotonic()
        what = f"{name} server on {host}:{port}"
        if watch is None or not watch.poll(now - last, now, progress, what):
            counted += now - last
        last = now
        if counted > timeout_s:
            tail = read_tail(log_path)
            fetched = watch.besides() if watch is not None else ""
            raise LaunchError(
                f"{what} not ready after {timeout_s:.0f} s{fetched}; log: {log_path}",
                reason="timeout",
                log_tail=_last_lines(tail, 30),
                fix="raise --timeout, or read the log for a hang",
            )
        time.sleep(poll_s)


def _running(proc: subprocess.Popen[bytes] | int | None) -> bool:
    if proc is None:
        return True
    if isinstance(proc, int):
        return pid_alive(proc)
    return proc.poll() is None


def _last_lines(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


def stop_server(proc_or_pid: subprocess.Popen[bytes] | int, timeout_s: float = 30.0) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left after `timeout_s`."""
    pid = proc_or_pid if isinstance(proc_or_pid, int) else proc_or_pid.pid
    proc = None if isinstance(proc_or_pid, int) else proc_or_pid
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not pid_alive(pid) and not group_alive(pid):
            break
        time.sleep(0.1)
    else:
        _signal_group(pid, signal.SIGKILL)
        end = time.monotonic() + 5.0
        while time.monotonic() < end and (pid_alive(pid) or group_alive(pid)):
            if proc is not None:
                proc.poll()
            time.sleep(0.05)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)


def _signal_group(pid: int, sig: int) -> None:
    """Signal the group led by `pid` (servers start their own session); else the pid alone."""
    try:
        os.killpg(pid, sig)
        return
    except ProcessLookupError:
        pass  # the leader's group is empty
    except PermissionError:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in process group `pgid`."""
    import psutil

    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue  # gone since the listing, or not ours to read
    return False
