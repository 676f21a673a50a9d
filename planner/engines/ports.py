"""Who listens on an engine's port: the listener's pid, command and session (Linux /proc),
so that `apply` tells its own servers from a foreign one (`PortHeldError`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

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
    """The process listening on a TCP port: pid None where /proc does not say (another
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


def _proc_addr(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} writes it (32-bit words in host byte order)."""
    b = bytes.fromhex(hex_addr)
    words = b"".join(b[i : i + 4][::-1] for i in range(0, len(b), 4))
    if len(words) == 4:
        return ipaddress.IPv4Address(words)
    a = ipaddress.IPv6Address(words)
    return a.ipv4_mapped or a


def _listen_inodes(port: int, host: str) -> set[str]:
    """Socket inodes of TCP listeners on `port` that a server binding `host` would meet: on
    `host` itself or on every address (IPv4 and IPv6), from /proc/net. A listener on another
    address (a node agent's relay on the node's address, beside its engine on loopback) is not
    in the way."""
    try:
        want = ipaddress.ip_address(host)
    except ValueError:
        want = None  # a name: every listener on the port counts
    out: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN; field 9 the inode
            if len(f) <= 9 or f[3] != "0A":
                continue
            addr, _, hex_port = f[1].rpartition(":")
            if int(hex_port, 16) != port:
                continue
            a = _proc_addr(addr)
            if want is None or a.is_unspecified or a == want:
                out.add(f[9])
    return out


def command_of(pid: int, max_chars: int = 120) -> str:
    """The command line of `pid`, shortened ("" when unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(raw.replace(b"\0", b" ").decode(errors="replace").split())
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def port_holder(port: int, host: str = "127.0.0.1") -> PortHolder | None:
    """Who listens on `port` now; None when nobody does (the port can be bound)."""
    inodes = _listen_inodes(port, host)
    if not inodes:
        return None if is_port_free(port, host) else PortHolder(port, None)
    wanted = {f"socket:[{i}]" for i in inodes}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fds = list((d / "fd").iterdir())
        except OSError:
            continue  # gone, or another user's
        for fd in fds:
            try:
                if os.readlink(fd) in wanted:
                    pid = int(d.name)
                    sid = os.getsid(pid)
                    return PortHolder(port, pid, command_of(pid), sid)
            except OSError:
                continue
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
