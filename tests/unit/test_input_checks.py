"""Input files that used to crash, hang or pass silently (issue 16 items 10, 12, 13; issue 15 item 1).

Every case runs the CLI as a user would: exit 2 with `error:` naming the file and field,
and a `fix:`; never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_helpers import run_cli_one_line
from plan_files import TINY_ARCH

from planner import io

ROOT = Path(__file__).resolve().parents[2]
LAB16 = ROOT / "plans" / "examples" / "lab16"


def _refused(argv, capsys, file, *needles) -> None:
    code, _, err = run_cli_one_line(argv, capsys)
    assert code == 2, err
    assert f"{file}:" in err and "fix:" in err and "Traceback" not in err, err
    for n in needles:
        assert n in err, err


def _optimize_lab16(tmp_path, slo=LAB16 / "slo.yaml", workload=LAB16 / "workload.yaml") -> list:
    """`planner optimize` on lab16 with `slo` and `workload` in place of its own."""
    return [
        "optimize",
        "-c",
        LAB16 / "cluster.yaml",
        "-m",
        LAB16 / "models.yaml",
        "-s",
        slo,
        "-w",
        workload,
        "-o",
        tmp_path / "p.yaml",
    ]


CLUSTER = (
    "kind: cluster\nnodes:\n  - {name: a, cpu_memory_gib: 64, gpus: [{type: L40S, count: 2}]}\n"
)


# ---- item 10: tracebacks on odd YAML ---------------------------------------------------------


@pytest.mark.parametrize(
    "text,path,needle",
    [
        ("kind: [cluster]\nnodes: []\n", "kind:", "kind must be a word, found a list"),
        ("kind: {a: 1}\n", "kind:", "kind must be a word, found a dict"),
        ("a: " + "[" * 2000 + "]" * 2000 + "\n", "", "not valid YAML"),
        ("a: " + "[" * 100 + "]" * 100 + "\n", "", "nested more than 64 levels"),
    ],
    ids=["kind list", "kind mapping", "2000 deep", "100 deep"],
)
def test_odd_yaml_is_refused(tmp_path, capsys, text, path, needle):
    f = tmp_path / "x.yaml"
    f.write_text(text)
    _refused(["validate", f], capsys, f, path, needle)


def test_alias_bomb_is_refused(tmp_path, capsys):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 10)}]" for k in range(1, 9)]
    f = tmp_path / "bomb.yaml"
    f.write_text("kind: cluster\n" + "\n".join(lines) + "\n")
    _refused(["validate", f], capsys, f, "values once aliases are expanded")


def test_non_utf8_yaml(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_bytes(CLUSTER.encode() + b"# \xff\xfe\n")
    _refused(["validate", f], capsys, f, "not UTF-8")


# ---- item 12: architecture numbers without bounds -------------------------------------------


@pytest.mark.parametrize(
    "change,field,needle",
    [
        ({"total_params_b": float("inf"), "active_params_b": 1.0}, "total_params_b", "inf"),
        ({"hidden_size": 10**12}, "hidden_size", "above the limit 65536"),
        ({"num_attention_heads": 4, "num_kv_heads": 8}, "num_kv_heads", "8 KV heads"),
    ],
    ids=["inf params", "hidden 1e12", "8 kv for 4 heads"],
)
def test_architecture_bounds(tmp_path, capsys, change, field, needle):
    doc = {
        "kind": "models",
        "models": [
            {
                "name": "m",
                "architecture": {**TINY_ARCH, **change},
                "variants": [{"name": "bf16", "quantization": "bf16"}],
            }
        ],
    }
    f = tmp_path / "models.yaml"
    f.write_text(yaml.safe_dump(doc))
    _refused(["validate", f], capsys, f, f"models[0].architecture.{field}:", needle)


# ---- item 13: large inputs -------------------------------------------------------------------


def test_yaml_goes_through_the_c_loader_where_available():
    if not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("PyYAML was built without libyaml here")
    assert io._LOADER is yaml.CSafeLoader


def test_size_limit_names_itself(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(io, "MAX_YAML_BYTES", 1 << 20)
    f = tmp_path / "cluster.yaml"
    f.write_text(CLUSTER + "# " + "x" * (1 << 20) + "\n")
    _refused(["validate", f], capsys, f, "over the 1 MiB limit on input YAML files")


def test_a_duplicate_among_ten_thousand_nodes_is_found(tmp_path, capsys):
    nodes = [
        {"name": f"n{i}", "cpu_memory_gib": 64, "gpus": [{"type": "L40S", "count": 4}]}
        for i in range(10_810)
    ]
    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump({"kind": "cluster", "nodes": [*nodes, nodes[5]]}))
    _refused(["validate", f], capsys, f, "duplicate node names: ['n5']")


def test_a_workload_spec_past_the_size_limit(tmp_path, capsys):
    f = tmp_path / "w.yaml"
    f.write_text("users: 10000\ndays: 366\n")
    _refused(["validate", f], capsys, f, "users:", "over the limit of 10,000,000")
    argv = _optimize_lab16(tmp_path, workload=f)
    _refused(argv, capsys, f, "over the limit")
    assert not (tmp_path / "p.yaml").exists()


# ---- issue 15 item 1: typos that changed the plan silently -----------------------------------


def test_slo_override_for_an_unknown_model(tmp_path, capsys):
    s = tmp_path / "slo.yaml"
    s.write_text("kind: slo\ndefault: {ttft_p95_s: 5}\nmodels:\n  coderr-32b: {ttft_p95_s: 2}\n")
    needles = ("models.coderr-32b:", "did you mean 'coder-32b'")
    _refused(["validate", s, "--models", LAB16 / "models.yaml"], capsys, s, *needles)
    _refused(["validate", LAB16 / "models.yaml", s], capsys, s, *needles)
    argv = _optimize_lab16(tmp_path, slo=s)
    _refused(argv, capsys, s, *needles)


def test_workload_role_naming_an_unknown_model(tmp_path, capsys):
    w = tmp_path / "w.yaml"
    w.write_text("users: 3\nroles:\n  coder: {model: coder-33b}\n")
    needles = ("roles.coder.model:", "did you mean 'coder-32b'")
    _refused(["validate", w, "--models", LAB16 / "models.yaml"], capsys, w, *needles)
    argv = _optimize_lab16(tmp_path, workload=w)
    _refused(argv, capsys, w, *needles)
    # roles the file leaves at their defaults are still mapped onto the models file
    ok = tmp_path / "ok.yaml"
    ok.write_text("users: 3\nroles:\n  coder: {model: coder-32b}\n")
    code, _, err = run_cli_one_line(["validate", ok, "--models", LAB16 / "models.yaml"], capsys)
    assert code == 0, err
