"""keys.yaml: who may call the gateway, which models, how often (`planner gateway --keys`).

Each entry is one key (the reference is LiteLLM's virtual keys: allowed models, requests per
minute, parallel requests). The key itself is never stored: `planner keys add` prints it once
and writes only its salted hash (planner/keys.py says why HMAC-SHA256 and not a slow KDF).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from planner.errors import InputError
from planner.schemas.common import SafeName, Strict, did_you_mean, duplicates

KEY_PREFIX = "sk-planner-"  # every key `planner keys add` makes starts with this
HASH_SCHEME = "hmac-sha256"
_HASH_RE = re.compile(rf"^{HASH_SCHEME}\$[0-9a-f]{{32}}\$[0-9a-f]{{64}}$")


class Key(Strict):
    """One key: who holds it and what it may do."""

    name: SafeName = Field(
        description="who holds the key (a user or a team): the identity in the request log, "
        "/metrics and `planner adjust`"
    )
    hash: str = Field(
        description=f"salted hash of the key, `{HASH_SCHEME}$SALT$DIGEST` (written by "
        "`planner keys add`; the key itself is never stored)"
    )
    models: list[SafeName] | None = Field(
        default=None, description="models the key may call (default: every model)"
    )
    max_concurrency: int | None = Field(
        default=None, ge=1, le=100_000, description="most requests of this key in flight at once"
    )
    requests_per_minute: int | None = Field(
        default=None, ge=1, le=10_000_000, description="most requests in any 60 s"
    )
    admin: bool = Field(
        default=False, description="may read /metrics and the detailed /health from any host"
    )
    trusted_proxy: bool = Field(
        default=False,
        description="a front end that forwards its users (a chat UI): its `X-User` header "
        "becomes a sub-identity, NAME/USER; every other key's X-User is ignored",
    )

    @field_validator("hash")
    @classmethod
    def _hash_shape(cls, v: str) -> str:
        if v.startswith(KEY_PREFIX):
            raise ValueError(
                "this is a key itself, not its hash: never store the key; remove the entry "
                "and make a new key with `planner keys add NAME`"
            )
        if not _HASH_RE.match(v):
            raise ValueError(
                f"not a key hash ({HASH_SCHEME}$<32 hex salt>$<64 hex digest>, as "
                "`planner keys add` writes it)"
            )
        return v


class Keys(Strict):
    """kind: keys."""

    kind: Literal["keys"] = "keys"
    version: Literal[1] = 1
    keys: list[Key] = Field(default_factory=list, description="one entry per key")

    def by_name(self, name: str) -> Key | None:
        return next((k for k in self.keys if k.name == name), None)


def check_keys(keys: Keys, file: str, model_names: list[str] | None = None) -> None:
    """Names and hashes are unique; with `model_names`, every allowed model is one of them."""
    for field in ("name", "hash"):
        dup = duplicates(getattr(k, field) for k in keys.keys)
        if dup:
            i = next(i for i, k in enumerate(keys.keys) if getattr(k, field) == dup[0])
            j = next(j for j, k in enumerate(keys.keys) if getattr(k, field) == dup[0] and j > i)
            what = repr(dup[0]) if field == "name" else "the same hash"
            raise InputError(
                f"keys[{i}] and keys[{j}] have {what}",
                file=file,
                path=f"keys[{j}].{field}",
                fix="one entry per key: `planner keys remove NAME` the old one, then "
                "`planner keys add NAME`",
            )
    if model_names is None:
        return
    for i, k in enumerate(keys.keys):
        for j, m in enumerate(k.models or ()):
            if m not in model_names:
                raise InputError(
                    f"key {k.name!r} allows model {m!r}, which is not served"
                    f"{did_you_mean(m, model_names)}",
                    file=file,
                    path=f"keys[{i}].models[{j}]",
                    fix=f"use models of the plan: {sorted(model_names)}",
                )
