"""Who listens on an engine's port: the listener's pid, command and session (psutil), so
that `apply` tells its own servers from a foreign one (`PortHeldError`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass

from planner.errors import LaunchError, PortHeldError


def is_port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP listener could bind `host:port` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class PortHolder:
    """The process listening on a TCP port: pid None where psutil cannot say (another
    user's process, or no /proc)."""

    port: int
    pid: int | None
    command: str = ""
    sid: int | None = None  # its session: our servers lead their own

    def describe(self) -> str:
        """`port P is held by PID N (command)`."""
        who = f"PID {self.pid}" if self.pid is not None else "a process this user cannot see"
        cmd = f" ({self.command})" if self.command else ""
        return f"port {self.port} is held by {who}{cmd}"


def _in_the_way(ip: str, want: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
    """Whether a listener on `ip` blocks a server binding `want` (None: a name, every
    listener counts): the same address, or every address (IPv4 or IPv6)."""
    a = ipaddress.ip_address(ip)
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        a = a.ipv4_mapped
    return want is None or a.is_unspecified or a == want


def _listener_pids(port: int, host: str) -> list[int | None]:
    """The pids of TCP listeners on `port` that a server binding `host` would meet (None for
    one whose process this user cannot see). A listener on another address (a node agent's
    relay on the node's address, beside its engine on loopback) is not in the way."""
    import psutil

    try:
        want = ipaddress.ip_address(host)
    except ValueError:
        want = None
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return []  # no /proc (or not allowed): the bind test below still sees a holder
    return [
        c.pid
        for c in conns
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
        if _in_the_way(c.laddr.ip, want)
    ]


def command_of(pid: int, max_chars: int = 120) -> str:
    """The command line of `pid`, shortened ("" when unreadable)."""
    import psutil

    try:
        args = psutil.Process(pid).cmdline()
    except psutil.Error:
        return ""
    text = " ".join(" ".join(args).split())
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def port_holder(port: int, host: str = "127.0.0.1") -> PortHolder | None:
    """Who listens on `port` now; None when nobody does (the port can be bound)."""
    pids = _listener_pids(port, host)
    if not pids:
        return None if is_port_free(port, host) else PortHolder(port, None)
    for pid in pids:
        if pid is None:
            continue
        try:
            sid = os.getsid(pid)
        except OSError:
            continue  # gone since
        return PortHolder(port, pid, command_of(pid), sid)
    return PortHolder(port, None)


def owns_port(pid: int, port: int) -> bool | None:
    """Whether the server started as `pid` (the leader of its own session) or one of its
    processes listens on `port`; None when /proc cannot tell."""
    holder = port_holder(port)
    if holder is None:
        return False
    if holder.pid is None:
        return None
    return pid in (holder.pid, holder.sid)


def port_held_error(holder: PortHolder, log_tail: str = "") -> LaunchError:
    """The start failure of a port another program holds (exit 3); `log_tail`: what our own
    server wrote before it gave up (kept for the user)."""
    return PortHeldError(
        holder.describe(),
        reason="port_in_use",
        log_tail=log_tail,
        fix="stop that process, or move this state dir's servers: `planner apply --port-base "
        "N`, or `ports:` of the node in the cluster file",
    )


# Every server carries its log path in its environment: the log is unique to one instance of
# one state dir, so a listener that has it is provably an earlier server of that instance.
