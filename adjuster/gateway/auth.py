"""Who may call the gateway: keys, per-key limits, privileged routes, the bind rule.

With a keys file (`planner gateway --keys KEYS.yaml`, planner/keys.py) every route but
`/health` needs a key (`answers.presented_key`: `Authorization: Bearer KEY` or
`x-api-key: KEY`; 401 otherwise); past
its `requests_per_minute` (any 60 s) or `max_concurrency` a proxied request gets 429 with
`Retry-After`; all of this runs on the request's head, before a byte of its body is read
(`gate`, the server's h1server.Gate). A model outside the key's `models` is 403 once the
body names it (`admit`). Each answer is an OpenAI-style JSON body. The caller's identity
(request log, /metrics, `adjust`) is the key's `name`; a `trusted_proxy` key's `X-User`
becomes NAME/USER, any other key's X-User is ignored. The file is re-read on SIGHUP and when
it changes (its mode too); requests in flight keep the entry they were admitted with; a bad
file, or one others may read, keeps the keys in force, and a deleted one leaves no key valid
(each logged).

Without keys the gateway listens on loopback only (anyone who can reach it is a local user),
and the identity is `X-User`, else an HMAC of the bearer key with the install's secret. A
non-loopback bind without keys is refused unless `--insecure-no-auth`, which /health then
reports. `/metrics`, the detailed `/health` and any route outside `/v1/` (control routes)
need, with keys, an admin key (from any peer, loopback too: a reverse proxy on the same
host must not open them); without keys, a loopback peer. `/health` itself answers everyone
(liveness). docs/security.md has the scrape config.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import ipaddress
import logging
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from planner.adjuster.gateway.answers import error, identity, presented_key
from planner.adjuster.gateway.clock import SYSTEM
from planner.adjuster.gateway.h1server import Conn, Request
from planner.adjuster.gateway.reply import Response
from planner.errors import InputError
from planner.keys import KeyTable, install_secret, read_keys
from planner.schemas.keys import Key, Keys

log = logging.getLogger("planner.gateway")

_OPEN = ("/health",)  # answers everyone
_FOR_KEYS = "/v1/"  # the API any valid key may call; everything else is privileged
_MAX_SUB_CHARS = 64  # longest X-User kept under a trusted_proxy key
_WINDOW_S = 60.0


class Caller(NamedTuple):
    """Who sent a request: the key entry it presented (None without keys) and its identity
    (a named tuple: one is made per request)."""

    key: Key | None
    user: str
    loopback: bool

    @property
    def privileged(self) -> bool:
        """May read /metrics, the detailed /health and control routes: an admin key; without
        keys, a loopback peer (`loopback` is False for every caller when keys are on)."""
        return self.loopback or (self.key is not None and self.key.admin)


@functools.lru_cache(maxsize=4096)  # per request: peers are few, parsing is not free
def is_loopback(host: str) -> bool:
    """Whether an address (or `localhost`) is loopback; a hostname or "" / 0.0.0.0 is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def check_bind(host: str, have_keys: bool, insecure: bool) -> str | None:
    """InputError for a non-loopback bind without keys; the warning to print when
    `--insecure-no-auth` allows it; None when nothing need be said."""
    if have_keys or is_loopback(host):
        return None
    if not insecure:
        raise InputError(
            f"--host {host} listens beyond loopback, and without --keys anyone who reaches "
            "the port could use every model",
            path="--host",
            fix="create a key (`planner keys add NAME --file keys.yaml`) and pass "
            "--keys keys.yaml; or listen on 127.0.0.1; or, on a network you trust "
            "entirely, pass --insecure-no-auth",
        )
    return (
        f"WARNING: --insecure-no-auth: listening on {host} with no authentication; anyone "
        "who reaches this port can call every model (/health reports this)"
    )


class Auth:
    """The gateway's key check, limits and key-file reloads (one per gateway)."""

    def __init__(
        self,
        secret: bytes,
        keys_path: str | Path | None = None,
        *,
        insecure: bool = False,
        model_names: list[str] | None = None,
        clock: Callable[[], float] = SYSTEM.mono_s,
        watch_s: float = 1.0,
    ):
        self.secret = secret
        self.keys_path = Path(keys_path) if keys_path is not None else None
        self.insecure = insecure
        self.model_names = model_names
        self.clock = clock
        self.watch_s = watch_s  # how often the keys file is checked for a change
        self.table: KeyTable | None = None
        self._stamp: tuple[int, int, int, int] | None = None
        self.inflight: dict[str, int] = collections.defaultdict(int)  # by key name
        self.recent: dict[str, collections.deque[float]] = collections.defaultdict(
            collections.deque
        )  # admission times of the last 60 s, by key name
        self.admitted: dict[str, int] = collections.defaultdict(int)  # by key name
        self.denied: dict[tuple[str, int], int] = collections.defaultdict(int)
        self.reloads = 0
        if self.keys_path is not None:
            self._load()  # the first load raises: a bad file stops the start (exit 2)

    @classmethod
    def open(cls, state_dir: str | Path, keys_path: str | Path | None = None, **kw: Any) -> Auth:
        """An Auth with the install secret of `state_dir`."""
        return cls(install_secret(state_dir), keys_path, **kw)

    @property
    def mode(self) -> str:
        """keys | loopback-only | insecure-no-auth (reported by /health)."""
        if self.keys_path is not None:
            return "keys"
        return "insecure-no-auth" if self.insecure else "loopback-only"

    # ----- the keys file

    def _file_stamp(self) -> tuple[int, int, int, int] | None:
        """What says the keys file changed: mtime, size, inode and mode (a chmod too)."""
        assert self.keys_path is not None
        try:
            st = os.stat(self.keys_path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode)

    def _load(self) -> None:
        assert self.keys_path is not None
        stamp = self._file_stamp()
        keys = read_keys(self.keys_path, self.model_names)
        self.table, self._stamp = KeyTable(keys), stamp

    def reload(self) -> bool:
        """Re-read the keys file (SIGHUP, a change). A bad file, or one readable by others,
        keeps the keys in force; a deleted file leaves no key valid until it is back."""
        if self.keys_path is None:
            return False
        stamp = self._file_stamp()
        if stamp is None:
            self.table, self._stamp = KeyTable(Keys()), None
            self.reloads += 1
            log.error("keys file %s is gone: no key is valid until it is back", self.keys_path)
            return True
        if stamp[3] & 0o077:
            self._stamp = stamp  # not retried until it changes again
            log.error(
                "keys file %s not reloaded: others may read it (mode %o); the previous keys "
                "stay in force; `chmod 600` it",
                self.keys_path,
                stamp[3] & 0o777,
            )
            return False
        try:
            self._load()
        except InputError as e:
            self._stamp = self._file_stamp()  # not retried until it changes again
            log.error("keys file not reloaded, the previous keys stay in force: %s", e)
            return False
        self.reloads += 1
        assert self.table is not None
        log.warning("keys reloaded from %s: %d keys", self.keys_path, len(self.table.keys.keys))
        return True

    async def watch(self) -> None:
        """Reload when the keys file changes (mtime, size or inode: an atomic replace too)."""
        while self.keys_path is not None:
            await asyncio.sleep(self.watch_s)
            if self._file_stamp() != self._stamp:
                self.reload()

    # ----- per request

    def caller(
        self, headers: Mapping[str, str], remote: str | None, conn: Conn | None = None
    ) -> Caller | None:
        """The caller of a request (`headers` by lower-case name); None: keys are on and it
        presents no valid key. `conn`, the request's connection, keeps the last key it
        presented and its caller: a kept-alive connection sends the same key every time,
        and the lookup hashes it. The key is compared as a string only with what the same
        connection sent before, and the caller kept only while the keys in force are the
        same (a reload makes a new table)."""
        table = self.table
        if table is None:
            loopback = remote is not None and is_loopback(remote)
            return Caller(None, identity(headers, self.secret)[0], loopback)
        presented = presented_key(headers)
        memo = conn.auth_memo if conn is not None else None
        if memo is not None and memo[0] is table and memo[1] == presented:
            who = memo[2]
        else:
            key = table.lookup(presented) if presented else None
            # with keys, only an admin key is privileged
            who = Caller(key, key.name, False) if key is not None else None
            if conn is not None:
                conn.auth_memo = (table, presented, who)
        if who is not None and who.key is not None and who.key.trusted_proxy:
            raw = headers.get("x-user", "")[:_MAX_SUB_CHARS]
            sub = "".join(c for c in raw if c.isprintable())
            if sub:
                who = Caller(who.key, f"{who.key.name}/{sub}", False)
        return who

    def gate(self, request: Request, limited: bool) -> Response | None:
        """Run on the request's head, before any byte of its body is read (h1server.Gate):
        401 / 403 for a caller that may not make it, and for a `limited` route (a proxied
        one) 429 past the key's limits, else None with a slot of the key taken (`release`
        gives it back). The caller is kept on the request (`request.caller`)."""
        path = request.path
        who = self.caller(request.headers, request.conn.peer, request.conn)
        if path in _OPEN:  # answers everyone; a privileged caller only adds details
            request.caller = who or Caller(None, "", False)
            return None
        if who is None:
            self.denied[("", 401)] += 1
            return error(
                401,
                "a valid key is needed: send `Authorization: Bearer KEY` or `x-api-key: "
                "KEY` (ask the gateway's admin for a key: `planner keys add NAME`)",
                "AuthenticationError",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not path.startswith(_FOR_KEYS) and not who.privileged:
            self.denied[(who.key.name if who.key else "", 403)] += 1
            need = "an admin key" if self.table is not None else "a request from the gateway's host"
            return error(403, f"{path} needs {need}", "PermissionDeniedError")
        request.caller = who
        if who.key is not None:
            request.owner = who.key.name
            if limited:
                return self.limit(request, who.key)
        return None

    def identity(self, request: Request) -> tuple[str, str]:
        """(user, session) of a request `check` let through."""
        who = request.caller
        return (who.user if who is not None else ""), request.headers.get("x-session", "")

    def allows(self, request: Request, model: str) -> bool:
        """Whether the request's key may call `model` (always, without keys)."""
        who = request.caller
        key = who.key if who is not None else None
        return key is None or key.models is None or model in key.models

    def details(self, request: Request) -> bool:
        """Whether the request may see detailed status (Caller.privileged)."""
        who = request.caller
        return who is not None and who.privileged

    def admit(self, request: Request, model: str) -> Response | None:
        """403 for a model outside the request's key's list (the model is in the body: this
        runs after it is read); else None."""
        who = request.caller
        key = who.key if who is not None else None
        if key is None or key.models is None or model in key.models:
            return None
        self.denied[(key.name, 403)] += 1
        return error(
            403,
            f"key {key.name!r} may not call model {model!r}; it may call {key.models}",
            "PermissionDeniedError",
            models=key.models,
        )

    def limit(self, request: Request, key: Key) -> Response | None:
        """429 past the key's limits; else None, and a slot of the key is taken."""
        name = key.name
        rpm = key.requests_per_minute
        now = self.clock() if rpm is not None else 0.0
        if rpm is not None:  # a sliding window: at most rpm admissions in any 60 s
            recent = self.recent[name]
            while recent and recent[0] <= now - _WINDOW_S:
                recent.popleft()
            if len(recent) >= rpm:
                wait_s = recent[0] + _WINDOW_S - now
                return self._limited(name, f"{rpm} requests per minute", wait_s)
        if key.max_concurrency is not None and self.inflight[name] >= key.max_concurrency:
            return self._limited(name, f"{key.max_concurrency} requests at once", 1.0)
        if rpm is not None:
            self.recent[name].append(now)
        self.inflight[name] += 1
        self.admitted[name] += 1
        request.admitted = name
        return None

    def _limited(self, name: str, limit: str, wait_s: float) -> Response:
        self.denied[(name, 429)] += 1
        return error(
            429,
            f"key {name!r} is over its limit of {limit}; retry later",
            "RateLimitError",
            headers={"Retry-After": str(max(1, math.ceil(wait_s)))},
        )

    def release(self, request: Request) -> None:
        """Give back the slot `admit` took (no-op when it took none)."""
        name = request.admitted
        if name is not None:
            self.inflight[name] -= 1
            request.admitted = None

    def render_metrics(self) -> str:
        """Prometheus text of admissions and refusals by key name (bounded: names of the file)."""
        out = [
            "# HELP planner_gateway_key_requests_total Requests admitted, by key name.",
            "# TYPE planner_gateway_key_requests_total counter",
            *(
                f'planner_gateway_key_requests_total{{key="{k}"}} {v}'
                for k, v in sorted(self.admitted.items())
            ),
            "# HELP planner_gateway_auth_denied_total Requests refused by the key check, by key "
            'name ("" when no valid key) and status (401, 403, 429).',
            "# TYPE planner_gateway_auth_denied_total counter",
            *(
                f'planner_gateway_auth_denied_total{{key="{k}",status="{s}"}} {v}'
                for (k, s), v in sorted(self.denied.items())
            ),
            "# HELP planner_gateway_keys_reloads_total Reloads of the keys file.",
            "# TYPE planner_gateway_keys_reloads_total counter",
            f"planner_gateway_keys_reloads_total {self.reloads}",
        ]
        return "\n".join(out) + "\n"
