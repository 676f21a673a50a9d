"""The engine registry and what a plan says about its engine (planner/engines/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.catalog.gpus import GPUS
from planner.engines.base import EngineFeature, get_engine
from planner.engines.kinds import DEFAULT_KIND, engine_kinds
from planner.engines.vllm import ENGINE as VLLM
from planner.errors import InputError
from planner.planfile import plan_text
from planner.schemas import load_plan, parse
from planner.schemas.plan import EngineArgs, Instance

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "plan_small.yaml"
MEM = {"weights": 1.0, "kv": 1.0, "overhead": 0.5}


def _inst(**engine) -> Instance:
    return Instance.model_validate(
        {
            "id": "a-0",
            "model": "a",
            "variant": "bf16",
            "node": "n",
            "gpus": [0],
            "tier": "host",
            "memory_gib": MEM,
            "port": 8100,
            "engine": engine,
        }
    )


def test_registry_finds_vllm_by_kind_and_names_the_known_ones():
    assert DEFAULT_KIND == "vllm" and "vllm" in engine_kinds()
    assert get_engine("vllm") is VLLM
    with pytest.raises(ValueError, match="known: vllm"):
        get_engine("sglang")


def test_plan_engine_kind_defaults_to_vllm_and_is_not_written():
    inst = _inst(max_model_len=1024)
    assert inst.engine.kind == "vllm"
    # an old plan's engine block loads unchanged and writes back the same
    assert "kind" not in inst.model_dump(mode="json")["engine"]
    assert "kind" not in inst.engine.model_dump()
    assert _inst(kind="vllm", max_model_len=1024) == inst


def test_unknown_engine_kind_is_rejected_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown engine kind 'tgi'; known: vllm"):
        EngineArgs(kind="tgi")


def test_golden_plan_loads_as_vllm_and_writes_back_byte_identical():
    text = GOLDEN.read_text()
    plan = load_plan(GOLDEN)
    assert {i.engine.kind for p in plan.points for i in p.instances} == {"vllm"}
    assert plan_text(plan) == text


def test_plan_file_naming_an_unknown_engine_is_an_input_error():
    data = yaml.safe_load(GOLDEN.read_text())
    data["points"][0]["instances"][0]["engine"]["kind"] = "tgi"
    with pytest.raises(InputError, match=r"engine\.kind: unknown engine kind 'tgi'"):
        parse(data, "plan", "plan.yaml")


def test_vllm_routes_levels_and_features():
    assert VLLM.sleep_route(1) == "/sleep?level=1" and VLLM.wake_route == "/wake_up"
    assert VLLM.sleep_level("host") == 1 and VLLM.sleep_level("disk") == 2
    assert EngineFeature.SLEEP_LEVEL_1 in VLLM.features("cuda")
    assert EngineFeature.SLEEP_LEVEL_1 not in VLLM.features("cpu")
    assert VLLM.quantization_flag("awq") == "awq" and VLLM.quantization_flag("bf16") is None
    assert VLLM.quantization_flag(None) is None


def test_vllm_batch_defaults_follow_the_gpu():
    h100 = next(g for g in GPUS.values() if g.name.lower().startswith("h100"))
    a100 = next(g for g in GPUS.values() if g.name.lower().startswith("a100"))
    assert VLLM.batch_defaults(h100) == (1024, 8192)
    assert VLLM.batch_defaults(a100) == (256, 2048)
    assert VLLM.batch_defaults(a100, entry="offline") == (256, 8192)


def test_the_engine_skeleton_in_the_docs_has_every_protocol_member():
    """docs/architecture.md shows a new engine's module: it must stay whole as the protocol grows."""
    import inspect
    import re

    from planner.engines.base import Engine

    doc = (GOLDEN.parents[2] / "docs" / "architecture.md").read_text()
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", doc, re.S) if "ENGINE = " in c]
    ns: dict = {}
    exec(compile(code, "architecture.md", "exec"), ns)  # the skeleton is a valid module
    skeleton = type(ns["ENGINE"])
    members = {k for k in vars(Engine) if not k.startswith("_")} | set(Engine.__annotations__)
    missing = {m for m in members if not hasattr(skeleton, m)}
    assert not missing, f"the skeleton lacks {sorted(missing)}"
    for name in members:
        if callable(getattr(Engine, name, None)):
            want = list(inspect.signature(getattr(Engine, name)).parameters)
            assert list(inspect.signature(getattr(skeleton, name)).parameters) == want, name
