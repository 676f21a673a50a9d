"""The cells of the last line every bench prints (`RESULT key=value ... pass=0|1`) and the
targets before it; each bench prints the `RESULT` line itself."""

from __future__ import annotations


def cells(ok: bool, fields: dict[str, object]) -> str:
    """`fields` as `key=value` in order (floats to 3 places, the rest as they print), then
    `pass=1` or `pass=0`."""
    out = [f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in fields.items()]
    return " ".join([*out, f"pass={int(ok)}"])


def targets(checks: dict[str, bool]) -> bool:
    """Print each target (`what`: met or MISSED); return whether all are met."""
    for what, ok in checks.items():
        print(f"  target {what}: {'met' if ok else 'MISSED'}")
    return all(checks.values())
