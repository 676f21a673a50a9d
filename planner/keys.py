"""Gateway keys: making them, their salted hashes, the keys file, and the per-install secret.

A key is `sk-planner-` + 32 random bytes (base64url). The keys file stores only
`hmac-sha256$SALT$HMAC-SHA256(SALT, KEY)`, 16 random bytes of salt per key.

Why a fast keyed hash and not scrypt/argon2: slow KDFs exist to make guessing a *low-entropy*
password expensive. These keys carry 256 random bits; no number of guesses finds one, slow or
fast, so a slow hash would buy nothing and cost every request (or every unknown key: a
denial-of-service lever). The salt makes equal keys hash differently in different files and
rules out precomputed tables. Verification takes about a microsecond per entry; a key that
matched once is remembered by its SHA-256 (not the key itself), so a request costs one
SHA-256 and a dict look-up (bench/gateway_overhead.py prints the auth check's CPU per request).

Key ids in the request log without a keys file (loopback mode) are an HMAC of the bearer key
with a per-install secret (`<state dir>/install.secret`, 0600): not a bare hash, which anyone
holding a list of candidate keys could match against the log.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

from planner.errors import InputError
from planner.schemas.common import SAFE_NAME_PATTERN
from planner.schemas.keys import HASH_SCHEME, KEY_PREFIX, Key, Keys, check_keys

INSTALL_SECRET = "install.secret"
_MAX_KEY_CHARS = 256  # longer bearer strings are no key of ours: refused without hashing
_HEADER = "# planner keys: only salted hashes (`planner keys add|list|remove`); keep this 0600\n"


def new_key() -> str:
    """A fresh random key (shown once, never stored)."""
    return KEY_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


def hash_key(key: str, salt: bytes | None = None) -> str:
    """`hmac-sha256$SALT$DIGEST` of a key (a new random salt unless given)."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hmac.new(salt, key.encode(), hashlib.sha256).hexdigest()
    return f"{HASH_SCHEME}${salt.hex()}${digest}"


class KeyTable:
    """The keys of one keys file, looked up by the key a request presents."""

    def __init__(self, keys: Keys):
        self.keys = keys
        self._entries: list[tuple[Key, bytes, bytes]] = []
        for k in keys.keys:
            _, salt, digest = k.hash.split("$")
            self._entries.append((k, bytes.fromhex(salt), bytes.fromhex(digest)))
        self._known: dict[bytes, Key] = {}  # SHA-256 of a key that matched -> its entry

    def lookup(self, presented: str) -> Key | None:
        """The entry of a presented key; None when it is no key of this file."""
        if not presented or len(presented) > _MAX_KEY_CHARS:
            return None
        raw = presented.encode()
        tag = hashlib.sha256(raw).digest()
        got = self._known.get(tag)
        if got is not None:
            return got
        for key, salt, digest in self._entries:  # every entry: no early exit on a match
            if hmac.compare_digest(hmac.new(salt, raw, hashlib.sha256).digest(), digest):
                got = key
        if got is not None:
            self._known[tag] = got  # only keys that match: bounded by the file's entries
        return got


def read_keys(path: str | Path, model_names: list[str] | None = None) -> Keys:
    """A keys file, validated (InputError naming file, field and fix)."""
    from planner.schemas import load

    keys: Keys = load(path, "keys")
    if model_names is not None:
        check_keys(keys, str(path), model_names)
    return keys


def write_keys(path: str | Path, keys: Keys) -> None:
    """Write a keys file atomically, mode 0600 whatever the umask."""
    import yaml

    from planner.io import atomic_write_text

    data = {
        "kind": "keys",
        "version": 1,
        "keys": [k.model_dump(exclude_defaults=True) for k in keys.keys],
    }
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=200)
    atomic_write_text(path, _HEADER + text, mode=0o600)


def add_key(
    path: str | Path,
    name: str,
    *,
    models: list[str] | None = None,
    admin: bool = False,
    trusted_proxy: bool = False,
    max_concurrency: int | None = None,
    requests_per_minute: int | None = None,
) -> str:
    """Append a new key for `name` to the keys file (made when missing); returns the key."""
    p = Path(path)
    keys = read_keys(p) if p.exists() else Keys()
    if keys.by_name(name) is not None:
        raise InputError(
            f"a key named {name!r} exists already",
            file=str(p),
            path="NAME",
            fix=f"pick another name, or `planner keys remove {name}` first",
        )
    for where, word in [("NAME", name), *(("--models", m) for m in models or ())]:
        if len(word) > 128 or not re.fullmatch(SAFE_NAME_PATTERN, word):
            raise InputError(
                f"{word!r} is not a safe name (it is written to logs and metrics)",
                path=where,
                fix="use letters, digits and . _ : - only, starting with a letter or digit",
            )
    key = new_key()
    entry = Key(
        name=name,
        hash=hash_key(key),
        models=models or None,
        admin=admin,
        trusted_proxy=trusted_proxy,
        max_concurrency=max_concurrency,
        requests_per_minute=requests_per_minute,
    )
    keys.keys.append(entry)
    write_keys(p, keys)
    return key


def remove_key(path: str | Path, name: str) -> None:
    """Drop the key named `name` (InputError when there is none)."""
    keys = read_keys(path)
    if keys.by_name(name) is None:
        raise InputError(
            f"no key named {name!r}",
            file=str(path),
            path="NAME",
            fix=f"use one of {[k.name for k in keys.keys]}",
        )
    keys.keys = [k for k in keys.keys if k.name != name]
    write_keys(path, keys)


def install_secret(state_dir: str | Path) -> bytes:
    """The per-install secret of a state dir (made on first use, 0600)."""
    d = Path(state_dir)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    p = d / INSTALL_SECRET
    with contextlib.suppress(FileExistsError):
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    if p.stat().st_mode & 0o077:
        p.chmod(0o600)
    text = p.read_text().strip()
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise InputError(
            "the install secret is damaged",
            file=str(p),
            fix="delete the file: a new one is made (key ids in new log rows then change)",
        )
    return secret


def key_id(secret: bytes, key: str) -> str:
    """A bearer key's id in logs and metrics: `key-` + 12 hex of HMAC-SHA256(secret, key)."""
    return "key-" + hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()[:12]
