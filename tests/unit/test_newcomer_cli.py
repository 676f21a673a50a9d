"""A newcomer's first hour (issue 15): each rough edge, run through the CLI as a user would.

The wheel and the missing extras on a real base install are in
tests/integration/test_wheel_install.py; the README tour as written in
tests/integration/test_readme_tour.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from cli_helpers import run_cli as run
from hypothesis import given
from hypothesis import strategies as st

from planner.cli.main import app
from planner.cli.tables import Col, fit_table, fmt_attainment, fmt_num
from planner.schemas import load_cluster, load_plan

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "data" / "small"
OLD_PLAN = ROOT / "tests" / "data" / "plan_small_before_gpu_type.yaml"


def cli(args: list[str], cwd: Path, columns: int | None = None) -> subprocess.CompletedProcess:
    """The CLI in a child process with stdout a pipe (as `planner ... | less`)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = str(columns)
    argv = [sys.executable, "-m", "planner.cli.main", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "small.plan.yaml"
    proc = cli(
        [
            "optimize",
            "-c",
            f"{SMALL}/cluster.yaml",
            "-m",
            f"{SMALL}/models.yaml",
            "-s",
            f"{SMALL}/slo.yaml",
            "-w",
            f"{SMALL}/workload.yaml",
            "--evals",
            "6",
            "--no-baselines",
            "-o",
            str(out),
        ],
        ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return out


# -- item 2: a missing extra is named before anything is written


def test_example_cpu_without_torch_names_the_extra_and_writes_nothing(
    tmp_path, capsys, monkeypatch
):
    # Stand-in for a base install: Python's own marker of a module that cannot be imported.
    # The real base install is tests/integration/test_wheel_install.py.
    monkeypatch.setitem(sys.modules, "torch", None)
    code, _, err = run(["example", "cpu", "-o", str(tmp_path / "cpu")], capsys)
    assert code == 2
    assert "needs torch" in err and "pip install 'planner[serve-cpu]'" in err
    assert not (tmp_path / "cpu").exists()


# -- item 3: examples come from the package


def test_example_lab16_copies_the_packaged_example(tmp_path, capsys):
    code, _, _ = run(["example", "lab16", "-o", str(tmp_path)], capsys)
    assert code == 0
    for name in ("cluster.yaml", "models.yaml", "slo.yaml", "workload.yaml", "README.md"):
        src = ROOT / "plans" / "examples" / "lab16" / name
        assert (tmp_path / name).read_text() == src.read_text()


def test_unknown_example_lists_the_known_ones(tmp_path, capsys):
    code, _, err = run(["example", "lab61", "-o", str(tmp_path / "x")], capsys)
    assert code == 2 and "no example named 'lab61'" in err and "lab16" in err
    assert not (tmp_path / "x").exists()


def test_docs_cited_by_the_code_exist():
    """Every document a docstring or comment names is in the repository."""
    me = Path(__file__).resolve()
    repo_docs = {p.name for p in ROOT.rglob("*.md") if ".venv" not in p.parts}
    cited: set[str] = set()
    for folder in ("planner", "cli", "optimizer", "profiler", "adjuster", "tests", "scripts"):
        for f in (ROOT / folder).rglob("*.*"):
            if f.suffix in (".py", ".sh") and f.resolve() != me:
                cited |= set(
                    re.findall(r"(?<![\w/.])((?:docs/)?[A-Za-z][\w-]*\.md)\b", f.read_text())
                )
    assert "docs/plan-format.md" in cited
    for doc in sorted(cited):
        where = ROOT / doc if doc.startswith("docs/") else None
        assert where.is_file() if where else doc in repo_docs, doc
    for doc in ("architecture", "file-formats", "plan-format", "baselines"):
        assert (ROOT / "docs" / f"{doc}.md").is_file()
    baselines = (ROOT / "docs" / "baselines.md").read_text()
    for name in ("`static`", "`lru`", "`melange`", "`lru@POINT`"):
        assert name in baselines


# -- item 5: the plan file reads top-down


def test_plan_file_has_header_points_first_and_gpu_types(small_plan):
    text = small_plan.read_text()
    header = [ln for ln in text.splitlines() if ln.startswith("#")]
    from planner import __version__

    assert f"planner {__version__}" in header[0]
    plan = load_plan(small_plan)
    for kind, ref in plan.inputs.items():
        assert any(kind in ln and ref.sha256[:12] in ln for ln in header), kind
    assert any("planner apply" in ln for ln in header)
    assert list(yaml.safe_load(text))[:4] == ["kind", "version", "selected", "points"]
    assert text.index("\npoints:") < text.index("\nworkload_summary:") < text.index("\ninputs:")

    cluster = load_cluster(SMALL / "cluster.yaml")
    types = {(n.name, i): g.spec.name for n in cluster.nodes for i, g in n.gpu_list()}
    for p in plan.points:
        for inst in p.instances:
            assert inst.gpu_type == types[(inst.node, inst.gpus[0])]
            others = {
                o.id
                for o in p.instances
                if o.id != inst.id and o.node == inst.node and set(o.gpus) & set(inst.gpus)
            }
            assert set(inst.shares_gpu_with) == others


def test_plans_written_before_the_layout_still_load_and_show(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # its inputs are recorded relative to the checkout
    plan = load_plan(OLD_PLAN)
    assert all(i.gpu_type == "" for p in plan.points for i in p.instances)
    code, out, err = run(["plan", "show", str(OLD_PLAN), "--json"], capsys)
    assert code == 0, err
    import json

    gpus = json.loads(out)["gpus"]
    cluster = load_cluster(SMALL / "cluster.yaml")
    types = {(n.name, i): g.spec.name for n in cluster.nodes for i, g in n.gpu_list()}
    assert gpus and all(g["gpu_type"] == types[(g["node"], g["gpu"])] for g in gpus)


def test_plan_show_per_gpu_table_and_point(small_plan, capsys):
    plan = load_plan(small_plan)
    other = next((p.name for p in plan.points if p.name != plan.selected), plan.selected)
    code, out, _ = run(["plan", "show", str(small_plan), "--point", other], capsys)
    assert code == 0
    assert f"point {other}" in out and "L40S" in out
    for inst in plan.point(other).instances:
        assert inst.id in out
    code, _, err = run(["plan", "show", str(small_plan), "--point", "nope"], capsys)
    assert code == 2 and "--point" in err and "fix:" in err


def test_plan_show_memory_adds_up(small_plan, capsys):
    import json

    code, out, _ = run(["plan", "show", str(small_plan), "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    point = load_plan(small_plan).point()
    awake = sum(i.memory_gib.weights * len(i.gpus) for i in point.instances if i.tier == "gpu")
    assert sum(g["weights_gib"] for g in data["gpus"]) == pytest.approx(awake, abs=0.01)
    for g in data["gpus"]:
        used = g["weights_gib"] + g["kv_gib"] + g["other_gib"] + g["sleeping_gib"]
        assert used <= g["capacity_gib"]


# -- item 6: tables at 80 columns and in pipes


def test_tables_fit_80_columns_without_cutting_cells(small_plan):
    for args in (["plan", "show", str(small_plan)], ["catalog", "models"]):
        proc = cli(args, ROOT, columns=80)
        assert proc.returncode == 0, proc.stderr
        if args[0] == "plan":
            assert "…" not in proc.stdout
            assert max(len(ln) for ln in proc.stdout.splitlines()) <= 80


def test_tables_in_a_pipe_keep_every_column(small_plan):
    proc = cli(["plan", "show", str(small_plan)], ROOT)
    assert proc.returncode == 0
    head = proc.stdout
    for col in ("weights", "KV", "other", "sleeping", "instances"):
        assert col in head
    assert "…" not in head and "left out" not in head


def test_fit_table_leaves_out_columns_in_drop_order_and_says_so():
    from rich.console import Console

    cols = [Col("name", "left"), Col("a" * 30, drop=1), Col("b" * 30, drop=2), Col("c" * 10)]
    rows = [(["x", "1", "2", "3"], None)]
    console = Console(width=80, record=True)
    console.print(fit_table("t", cols, rows, console=console))
    text = console.export_text()
    header = next(ln for ln in text.splitlines() if "name" in ln)
    assert "b" * 30 not in header and "a" * 30 in header and "c" * 10 in header
    assert "left out at 80 columns: " + "b" * 30 in text
    assert "…" not in text


@given(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False))
def test_fmt_num_never_uses_exponents(x):
    s = fmt_num(x)
    assert "e" not in s and "E" not in s
    assert float(s) == pytest.approx(x, rel=0.01, abs=1e-6 + 0.5 * (abs(x) >= 100))


def test_attainment_has_one_format():
    assert fmt_attainment(0.98612) == "98.6%"


# -- item 9: fixes that fit


def test_broken_yaml_fix_names_a_real_schema_command(tmp_path, capsys):
    bad = tmp_path / "slo.yaml"
    bad.write_text("kind: slo\ndefault: {ttft_p95_s: 1\n")
    code, _, err = run(["validate", str(bad)], capsys)
    assert code == 2 and str(bad) in err and "planner schema slo" in err and "KIND" not in err
    bad.write_text("default: [\n")
    code, _, err = run(["validate", str(bad)], capsys)
    assert code == 2 and "planner schema cluster" in err and "KIND" not in err


def _unplaceable(tmp_path: Path, variants: list[dict], capsys) -> str:
    (tmp_path / "cluster.yaml").write_text(
        "kind: cluster\nnodes:\n  - {name: n0, cpu_memory_gib: 64, gpus: [{type: RTX-3090, count: 1}]}\n"
    )
    (tmp_path / "models.yaml").write_text(
        yaml.safe_dump(
            {
                "kind": "models",
                "models": [
                    {"name": "big", "architecture": "Llama-3.1-70B-Instruct", "variants": variants}
                ],
            }
        )
    )
    (tmp_path / "slo.yaml").write_text("kind: slo\n")
    (tmp_path / "w.yaml").write_text("users: 2\ndays: 1\nroles: {planner: {model: big}}\n")
    code, _, err = run(
        [
            "optimize",
            "-c",
            str(tmp_path / "cluster.yaml"),
            "-m",
            str(tmp_path / "models.yaml"),
            "-s",
            str(tmp_path / "slo.yaml"),
            "-w",
            str(tmp_path / "w.yaml"),
            "-o",
            str(tmp_path / "p.yaml"),
        ],
        capsys,
    )
    assert code == 2 and "Traceback" not in err
    return err


def test_a_model_already_at_4_bits_is_not_told_to_add_a_quantized_variant(tmp_path, capsys):
    err = _unplaceable(tmp_path, [{"name": "awq", "quantization": "awq"}], capsys)
    fix = err.split("fix:")[1]
    assert "variant" not in fix and "add GPUs" in fix
    err = _unplaceable(tmp_path, [{"name": "fp8", "quantization": "fp8"}], capsys)
    assert "add an int4 (awq/gptq) variant of big" in err


def test_overload_is_said_and_its_fix_names_no_setting_without_a_flag(tmp_path, capsys):
    """Demand beyond the cluster gets points and a capacity table (issue 13), and the fix
    offered when nothing is placeable names no setting that has no flag (no headroom)."""
    from planner.optimizer.advice import capacity_fix
    from planner.schemas import load_models

    (tmp_path / "cluster.yaml").write_text(
        "kind: cluster\nnodes:\n  - {name: n0, cpu_memory_gib: 64, gpus: [{type: RTX-3090, count: 1}]}\n"
    )
    (tmp_path / "models.yaml").write_text(
        "kind: models\nmodels:\n  - name: p\n    architecture: Qwen2.5-7B-Instruct\n"
        "    max_context: 8192\n    variants: [{name: awq, quantization: awq}]\n"
    )
    (tmp_path / "slo.yaml").write_text("kind: slo\n")
    roles = ", ".join(
        f"{r}: {{model: p}}"
        for r in ("planner", "coder", "reasoner", "reviewer", "summarizer", "embed")
    )
    (tmp_path / "w.yaml").write_text(f"users: 400\ndays: 1\nstationary: true\nroles: {{{roles}}}\n")
    code, out, _ = run(
        [
            "optimize",
            "-c",
            str(tmp_path / "cluster.yaml"),
            "-m",
            str(tmp_path / "models.yaml"),
            "-s",
            str(tmp_path / "slo.yaml"),
            "-w",
            str(tmp_path / "w.yaml"),
            "--evals",
            "4",
            "--no-baselines",
            "-o",
            str(tmp_path / "p.yaml"),
        ],
        capsys,
    )
    assert code == 0 and "demand beyond what the cluster can serve" in out
    fix = capacity_fix(load_models(tmp_path / "models.yaml"))
    assert "headroom" not in fix and "variant" not in fix and "add GPUs" in fix


# -- item 10: docs and help agree


def _commands(group: typer.Typer):
    root = typer.main.get_command(group)

    def walk(cmd, path: list[str]):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield path

    yield from walk(root, [])


def test_help_shows_flags_as_flags_and_placeholders_in_capitals(capsys):
    paths = list(_commands(app))
    assert ["plan", "show"] in paths and ["optimize"] in paths
    for path in paths:
        code, out, _ = run([*path, "--help"], capsys)
        assert code == 0, path
        assert "<bool>" not in out, path
        usage = out.splitlines()[0]
        for placeholder in re.findall(r"[\[{]([A-Za-z.]+)[\]}]", usage):
            assert placeholder == placeholder.upper(), (path, usage)
        for line in out.splitlines():
            if line.strip().startswith("--json"):
                assert line.split()[1:2] != ["<bool>"] and "--json <" not in line, (path, line)


def test_json_takes_no_value(capsys):
    code, _, err = run(["catalog", "gpus", "--json", "true"], capsys)
    assert code == 2 and "Traceback" not in err


def test_lab16_readme_states_the_slo_file_attainment():
    readme = (ROOT / "plans" / "examples" / "lab16" / "README.md").read_text()
    slo = yaml.safe_load((ROOT / "plans" / "examples" / "lab16" / "slo.yaml").read_text())
    stated = re.search(r"met by (\d+)% of", readme)
    assert stated and int(stated.group(1)) == round(100 * slo["attainment"])


def test_readme_commands_exist():
    """Every `planner X Y` the README names is a command (help text and README agree)."""
    readme = (ROOT / "README.md").read_text()
    known = {" ".join(p) for p in _commands(app)}
    groups = {p[0] for p in _commands(app)}
    for m in re.finditer(r"`planner ([a-z]+)(?: ([a-z]+))?", readme):
        first, second = m.group(1), m.group(2)
        if first in groups and f"{first} {second}" not in known:
            assert first in known, m.group(0)
        else:
            assert first in known or f"{first} {second}" in known, m.group(0)
