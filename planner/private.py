"""Private files: the state dir is 0700 and what the planner writes in it 0600, whatever the umask.

The state dir holds who used which model when (the request log), the engines' secrets (the
state DB) and the engines' logs. Modes are set explicitly (`os.open` with a mode, then a
`chmod`, since the umask only ever narrows a mode): a dir or file that exists with wider modes
is tightened, and a note says so (logger `planner.security`; the CLI shows warnings).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path
from typing import BinaryIO

DIR_MODE = 0o700
FILE_MODE = 0o600

log = logging.getLogger("planner.security")


def _tighten(path: Path, want: int, *, note: bool = True) -> None:
    """chmod `path` to `want` when its mode grants more; a note when it did (and `note`)."""
    try:
        have = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if have & ~want:
        try:
            os.chmod(path, want)
        except PermissionError:
            log.warning(
                "%s has mode %o and cannot be tightened to %o (not its owner)", path, have, want
            )
            return
        if note:
            log.warning(
                "tightened %s from mode %o to %o (it is private to the planner)", path, have, want
            )


def private_dir(path: str | Path) -> Path:
    """Create `path` (and parents) with mode 0700, or tighten an existing one; returns it."""
    p = Path(path)
    if not p.is_dir():
        p.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(p, DIR_MODE)
    _tighten(p, DIR_MODE)
    return p


def private_file(path: str | Path) -> Path:
    """Make `path` exist with mode 0600 (created empty if absent, tightened if wider)."""
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    os.close(fd)
    _tighten(p, FILE_MODE)
    return p


def private_sqlite(path: str | Path, *, new: bool = False) -> Path:
    """A SQLite file and its WAL companions (`-wal`, `-shm`) at 0600 before SQLite opens it.

    SQLite creates the companions with the database file's mode, so a 0600 main file is enough
    for new ones; existing wider ones are tightened. `new`: SQLite just created the file under
    the umask (no note: nothing was exposed yet, the dir is private)."""
    p = Path(path)
    # Never open an existing database file here: closing any descriptor of it drops every
    # POSIX lock this process's SQLite connections hold on it (fcntl semantics), and another
    # process may then write beside them (sqlite.org, "How To Corrupt", 2.2). Create only.
    with contextlib.suppress(FileExistsError):
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    for q in (p, p.with_name(p.name + "-wal"), p.with_name(p.name + "-shm")):
        _tighten(q, FILE_MODE, note=not new)
    return p


def open_private_append(path: str | Path) -> BinaryIO:
    """Open `path` for appending bytes, created 0600 (an engine log)."""
    p = Path(path)
    private_dir(p.parent)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    _tighten(p, FILE_MODE)
    return os.fdopen(fd, "ab")
