"""The engine kinds a plan may name, and the module of each (the registry's table).

Kept apart from `base` so the plan schema can check `engine.kind` without importing the
Engine protocol, whose signatures name the plan's Instance (no import cycle).
"""

from __future__ import annotations

from typing import Any

DEFAULT_KIND = "vllm"

# kind -> module holding `ENGINE` (imported on first use: engines stay out of `--help`)
ENGINE_MODULES: dict[str, str] = {
    "vllm": "planner.engines.vllm",
}


# -> planner.engines.base.Engine, not named: base imports this module (no import cycle)
def load_engine(kind: str) -> Any:
    """The `ENGINE` of a known kind's module (get_engine checks the kind first)."""
    import importlib

    return importlib.import_module(ENGINE_MODULES[kind]).ENGINE


def engine_kinds() -> tuple[str, ...]:
    """The kinds a plan may name."""
    return tuple(ENGINE_MODULES)
