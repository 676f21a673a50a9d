"""Weights a server downloads from the Hugging Face hub on its first start: where they land
and whether they are still arriving, so that the wait for readiness tells a download (shown
as progress, not counted against `--timeout`) from a hang.

The hub client writes a repo's files under `HF_HUB_CACHE` (default `HF_HOME/hub`, default
`~/.cache/huggingface/hub`) in `models--ORG--NAME/blobs/`, a file being downloaded as
`<hash>.incomplete` that grows; `snapshots/` holds only links to the blobs.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

MIB = 1024**2
GIB = 1024**3


def hub_repo_dir(model_path: str, env: Mapping[str, str]) -> Path | None:
    """The hub cache folder a server started on `model_path` fills (`env`: the server's
    environment), or None when `model_path` is a folder on disk, not a repo id."""
    if not model_path or model_path.count("/") != 1 or model_path.startswith(("/", ".", "~")):
        return None
    if Path(model_path).exists():
        return None
    cache = env.get("HF_HUB_CACHE")
    if not cache:
        home = env.get("HF_HOME") or str(
            Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
        )
        cache = str(Path(home) / "hub")
    return Path(cache).expanduser() / ("models--" + model_path.replace("/", "--"))


def dir_bytes(path: Path) -> int:
    """Bytes of the regular files under `path` (links not followed); 0 when it is absent."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:  # renamed from .incomplete meanwhile
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


@dataclass
class DownloadWatch:
    """Polls one repo folder: `grew()` says whether bytes arrived since the last poll."""

    path: Path
    every_s: float = 10.0  # at most one progress line this often
    bytes: int = -1  # at the last poll (-1: not polled yet)
    start_bytes: int = 0
    downloading_s: float = 0.0  # time spent while it grew
    _last_line: float = -1e9

    def poll(
        self, dt_s: float, now: float, progress: Callable[[str], None] | None, what: str
    ) -> bool:
        """Whether the folder grew over the last `dt_s` (the first poll only sets the base);
        when it did, `progress` gets a line about `what` every `every_s` at most."""
        size = dir_bytes(self.path)
        grew = self.bytes >= 0 and size > self.bytes
        if self.bytes < 0:
            self.start_bytes = size
        self.bytes = size
        if grew:
            self.downloading_s += dt_s
            if progress is not None and now - self._last_line >= self.every_s:
                self._last_line = now
                progress(
                    f"{what}: downloading its weights into {self.path} ({self.describe()}); "
                    "--timeout counts once the download stops"
                )
        return grew

    def describe(self) -> str:
        """'1.25 GiB so far, 80 MiB/s' (the rate over the time it grew)."""
        got = self.bytes - self.start_bytes
        rate = got / self.downloading_s / MIB if self.downloading_s > 0 else 0.0
        return f"{self.bytes / GIB:.2f} GiB so far, {rate:.0f} MiB/s"

    def besides(self) -> str:
        """' besides 40 s downloading 2.10 GiB' for a timeout message; '' if nothing came."""
        if not self.downloading_s:
            return ""
        return f" besides {self.downloading_s:.0f} s downloading ({self.describe()})"
