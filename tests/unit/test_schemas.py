"""Input schemas: round trips, and every bad input exits 2 naming file, field path and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import schemas
from planner.catalog.gpus import GPUS
from planner.catalog.models import MODELS
from planner.io import dump_yaml

LAB16 = Path(__file__).resolve().parents[2] / "plans" / "examples" / "lab16"


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


# ---- round trips ---------------------------------------------------------------------------

_name = st.builds(
    str.__add__,
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=1),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", max_size=11),
)  # names are safe as file names: no leading dash


@st.composite
def clusters(draw):
    names = draw(st.lists(_name, min_size=1, max_size=4, unique=True))
    nodes = []
    for n in names:
        groups = draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "type": st.sampled_from(sorted(GPUS)),
                        "count": st.integers(1, 8),
                        "interconnect": st.sampled_from(["pcie", "nvlink"]),
                    }
                ),
                min_size=0,
                max_size=2,
            )
        )
        nodes.append(
            {
                "name": n,
                "cpu_memory_gib": draw(st.floats(1, 2048)),
                "gpus": groups,
                "disk_read_gbps": draw(st.one_of(st.none(), st.floats(0.1, 50))),
            }
        )
    return {"kind": "cluster", "name": draw(_name), "nodes": nodes}


@st.composite
def models_docs(draw):
    names = draw(st.lists(_name, min_size=1, max_size=4, unique=True))
    out = []
    for n in names:
        vnames = draw(st.lists(_name, min_size=1, max_size=3, unique=True))
        out.append(
            {
                "name": n,
                "architecture": draw(st.sampled_from(sorted(MODELS))),
                "max_context": draw(st.integers(16, 131072)),
                "priority": draw(st.integers(0, 100)),
                "variants": [
                    {
                        "name": v,
                        "quantization": draw(st.sampled_from(["bf16", "fp8", "awq", "gptq"])),
                        "path": f"org/{v}",
                        "quality_penalty": draw(st.floats(0, 1)),
                    }
                    for v in vnames
                ],
            }
        )
    return {"kind": "models", "models": out}


@st.composite
def slo_docs(draw):
    t = st.fixed_dictionaries(
        {
            "ttft_p95_s": st.floats(0.01, 100),
            "tpot_p95_s": st.floats(0.001, 10),
            "switch_p95_s": st.floats(0.1, 600),
        }
    )
    return {
        "kind": "slo",
        "default": draw(t),
        "models": draw(st.dictionaries(_name, t, max_size=3)),
        "attainment": draw(st.floats(0.01, 1)),
    }


@st.composite
def plan_docs(draw):
    points = []
    for pname in draw(st.lists(_name, min_size=1, max_size=3, unique=True)):
        insts = []
        for k, iid in enumerate(draw(st.lists(_name, min_size=0, max_size=4, unique=True))):
            tp = draw(st.sampled_from([1, 2, 4]))
            insts.append(
                {
                    "id": iid,
                    "model": draw(_name),
                    "variant": draw(_name),
                    "node": draw(_name),
                    "gpus": list(range(tp)),
                    "tp": tp,
                    "tier": draw(st.sampled_from(["gpu", "host", "disk"])),
                    "memory_gib": {
                        "weights": draw(st.floats(0, 100)),
                        "kv": draw(st.floats(0, 100)),
                        "overhead": draw(st.floats(0, 5)),
                    },
                    "engine": {
                        "gpu_memory_utilization": draw(st.floats(0.05, 1.0)),
                        "max_model_len": draw(st.integers(16, 131072)),
                        "kv_cache_dtype": draw(st.sampled_from(["auto", "fp8"])),
                    },
                    "port": 8100 + k,
                }
            )
        points.append(
            {
                "name": pname,
                "instances": insts,
                "predicted": {
                    "switch_p95_s": draw(st.floats(0, 100)),
                    "warm_gpu_gib": draw(st.floats(0, 1000)),
                },
            }
        )
    return {"kind": "plan", "selected": points[0]["name"], "points": points}


@pytest.mark.parametrize(
    "kind,strategy",
    [
        ("cluster", clusters()),
        ("models", models_docs()),
        ("slo", slo_docs()),
        ("plan", plan_docs()),
    ],
)
def test_round_trip(kind, strategy, tmp_path_factory):
    @settings(max_examples=30, deadline=None)
    @given(strategy)
    def check(doc):
        obj = schemas.parse(doc, kind)
        text = dump_yaml(obj.model_dump(mode="json", exclude_none=True))
        p = tmp_path_factory.mktemp("rt") / f"{kind}.yaml"
        p.write_text(text)
        again = schemas.load(p, kind)
        assert again.model_dump() == obj.model_dump()

    check()


def test_lab16_example_validates(capsys):
    code, out, _ = run_cli(
        ["validate", *(str(LAB16 / f) for f in ("cluster.yaml", "models.yaml", "slo.yaml"))], capsys
    )
    assert code == 0 and out.count("ok") == 3


@pytest.mark.parametrize("kind", ["cluster", "models", "slo", "plan", "profile", "trace"])
def test_schema_command(kind, capsys):
    import json

    code, out, _ = run_cli(["schema", kind], capsys)
    assert code == 0
    assert "properties" in json.loads(out)


# ---- rejections ----------------------------------------------------------------------------

CLUSTER_OK = """kind: cluster
nodes:
  - name: a
    cpu_memory_gib: 64
    gpus:
      - {type: L40S, count: 2}
"""

# (label, file, text, where the error points (None: the file), what it says)
BAD = [
    (
        "unknown key",
        "cluster.yaml",
        CLUSTER_OK.replace("cpu_memory_gib: 64", "cpu_memory_gib: 64\n    cpu_mem: 3"),
        "nodes[0].cpu_mem",
        "unknown key",
    ),
    (
        "wrong type",
        "cluster.yaml",
        CLUSTER_OK.replace("count: 2", "count: two"),
        "nodes[0].gpus[0].count",
        "integer",
    ),
    (
        "unknown gpu",
        "cluster.yaml",
        CLUSTER_OK.replace("L40S", "A100-90GB"),
        "nodes[0].gpus[0].type",
        "did you mean",
    ),
    (
        "negative",
        "cluster.yaml",
        CLUSTER_OK.replace("cpu_memory_gib: 64", "cpu_memory_gib: -4"),
        "nodes[0].cpu_memory_gib",
        "greater than",
    ),
    (
        "duplicate models",
        "models.yaml",
        """kind: models
models:
  - {name: m, architecture: Qwen3-8B, variants: [{name: a, quantization: bf16}]}
  - {name: m, architecture: Qwen3-8B, variants: [{name: a, quantization: bf16}]}
""",
        "models",
        "duplicate model names",
    ),
    (
        "unknown architecture",
        "models.yaml",
        """kind: models
models:
  - {name: m, architecture: Qwen3-33B, variants: [{name: a, quantization: bf16}]}
""",
        "models[0].architecture",
        "did you mean",
    ),
    (
        "bad quantization",
        "models.yaml",
        """kind: models
models:
  - {name: m, architecture: Qwen3-8B, variants: [{name: a, quantization: int3}]}
""",
        "models[0].variants[0].quantization",
        "bf16",
    ),
    (
        "negative slo",
        "slo.yaml",
        "kind: slo\ndefault: {ttft_p95_s: -1}\n",
        "default.ttft_p95_s",
        "greater than",
    ),
    (
        "truncated yaml",
        "cluster.yaml",
        "kind: cluster\nnodes:\n  - name: a\n    gpus: [{type: L40S,",
        None,
        "not valid YAML",
    ),
    ("empty file", "cluster.yaml", "", None, "empty"),
    ("unknown kind", "x.yaml", "kind: clustr\n", "kind", "did you mean 'cluster'"),
    # issue 15 item 9: reported as the unknown key, not as a missing field
    (
        "misspelt key",
        "cluster.yaml",
        CLUSTER_OK.replace("cpu_memory_gib", "cpu_memroy_gib"),
        "nodes[0].cpu_memroy_gib",
        "unknown key 'cpu_memroy_gib' (did you mean 'cpu_memory_gib'?)",
    ),
]


@pytest.mark.parametrize("label,fname,text,path,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_input_exits_2_with_location(label, fname, text, path, msg, tmp_path, capsys):
    f = _write(tmp_path, fname, text)
    code, _, err = run_cli(["validate", f], capsys)
    assert code == 2
    flat = " ".join(err.split())
    assert f in flat.replace(" ", "") or f in err.replace("\n", "")
    if path:
        assert f"{path}:" in flat
    assert msg in flat
    assert "fix:" in flat
    assert "Traceback" not in err


PLAN = """kind: plan
selected: p
points:
  - name: p
    instances:
      - id: i0
        model: m
        variant: a
        node: a
        gpus: [0, 1, 2]
        tp: 3
        memory_gib: {weights: 1, kv: 1, overhead: 1}
        port: 8100
"""


def test_tp_not_dividing_heads_in_plan(tmp_path, capsys):
    c = _write(tmp_path, "cluster.yaml", CLUSTER_OK.replace("count: 2", "count: 4"))
    m = _write(
        tmp_path,
        "models.yaml",
        "kind: models\nmodels:\n  - {name: m, architecture: Qwen3-8B, "
        "variants: [{name: a, quantization: bf16}]}\n",
    )
    p = _write(tmp_path, "plan.yaml", PLAN)
    code, _, err = run_cli(["validate", p, "--cluster", c, "--models", m], capsys)
    assert code == 2
    flat = " ".join(err.split())
    assert "points[0].instances[0].tp:" in flat and "does not divide" in flat and "fix:" in flat


def test_trace_with_unknown_model(tmp_path, capsys):
    pytest.importorskip("planner.trace.frame")
    m = _write(
        tmp_path,
        "models.yaml",
        "kind: models\nmodels:\n  - {name: m, architecture: Qwen3-8B, "
        "variants: [{name: a, quantization: bf16}]}\n",
    )
    t = _write(
        tmp_path, "t.csv", "timestamp,model,input_tokens,output_tokens\n0,m,10,5\n1,zz,10,5\n"
    )
    code, _, err = run_cli(["validate", t, "--models", m], capsys)
    assert code == 2 and "zz" in err and "Traceback" not in err


def test_trace_negative_tokens(tmp_path, capsys):
    pytest.importorskip("planner.trace.frame")
    t = _write(tmp_path, "t.csv", "timestamp,model,input_tokens,output_tokens\n0,m,-10,5\n")
    code, _, err = run_cli(["validate", t], capsys)
    assert code == 2 and "input_tokens" in err


def test_kind_mismatch(tmp_path, capsys):
    f = _write(tmp_path, "c.yaml", CLUSTER_OK)
    code, _, err = run_cli(["validate", f, "--kind", "slo"], capsys)
    assert code == 2 and "expected a slo file" in " ".join(err.split())


def test_yaml_dump_of_example_is_stable():
    obj = schemas.load(LAB16 / "models.yaml", "models")
    assert (
        yaml.safe_load(dump_yaml(obj.model_dump(mode="json")))["models"][0]["name"] == "planner-7b"
    )


def test_workload_spec_validates(tmp_path, capsys):
    pytest.importorskip("planner.optimizer.workload.synth")
    good = _write(tmp_path, "w.yaml", "users: 3\ndays: 2\n")
    code, out, _ = run_cli(["validate", good], capsys)
    assert code == 0 and "workload" in out
    bad = _write(tmp_path, "bad.yaml", "users: 0\n")
    code, _, err = run_cli(["validate", bad], capsys)
    assert code == 2 and "users:" in err and "fix:" in err


def test_handoff_naming_a_model_the_point_does_not_run(tmp_path, capsys):
    text = PLAN.replace("gpus: [0, 1, 2]", "gpus: [0]").replace("tp: 3", "tp: 1")
    f = _write(tmp_path, "plan.yaml", text + "    handoff: {m: [coder]}\n")
    code, _, err = run_cli(["validate", f], capsys)
    flat = " ".join(err.split())
    assert code == 2 and "names models no instance of it runs: ['coder']" in flat
    f = _write(tmp_path, "plan.yaml", text + "    handoff: {m: [m]}\n")
    assert run_cli(["validate", f], capsys)[0] == 0
