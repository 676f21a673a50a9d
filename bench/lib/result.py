"""The last line every bench prints: `RESULT key=value ... pass=0|1`, and its exit code."""

from __future__ import annotations


def finish(ok: bool, fields: dict[str, object]) -> int:
    """Print `RESULT` with `fields` in order (floats to 3 places, the rest as they print) and
    `pass=1` or `pass=0` last; return the exit code (1: a target missed)."""
    cells = [f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in fields.items()]
    print("RESULT " + " ".join([*cells, f"pass={int(ok)}"]))
    return 0 if ok else 1


def targets(checks: dict[str, bool]) -> bool:
    """Print each target (`what`: met or MISSED); return whether all are met."""
    for what, ok in checks.items():
        print(f"  target {what}: {'met' if ok else 'MISSED'}")
    return all(checks.values())
