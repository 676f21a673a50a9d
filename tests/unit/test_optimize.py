"""`planner optimize` end to end on a small example: determinism, golden plan, invariants,
infeasible inputs, explain and the report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from cli_helpers import run_cli

from planner.catalog.models import resolve_arch
from planner.cli.main import main
from planner.optimizer.invariants import memory_violations
from planner.schemas import load_cluster, load_models, load_plan

ROOT = Path(__file__).resolve().parents[2]
SMALL = "tests/data/small"
GOLDEN = ROOT / "tests" / "golden" / "plan_small.yaml"


def _optimize(cluster, models, slo, workload) -> list[str]:
    """`planner optimize` of these four inputs."""
    return ["optimize", "-c", str(cluster), "-m", str(models), "-s", str(slo), "-w", str(workload)]


INPUTS = [f"{SMALL}/{k}.yaml" for k in ("cluster", "models", "slo", "workload")]
ARGS = [*_optimize(*INPUTS), "--evals", "8", "--seed", "1"]


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory) -> Path:
    """One optimize run on the small example (module-scoped: the search takes seconds)."""
    out = tmp_path_factory.mktemp("plan") / "a.plan.yaml"
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with pytest.raises(SystemExit) as e:
            main([*ARGS, "--no-baselines", "--jobs", "2", "--json", "-o", str(out)])
        assert e.value.code == 0
    finally:
        os.chdir(cwd)
    return out


def test_same_inputs_same_plan_and_golden(small_plan, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    again = tmp_path / "b.plan.yaml"
    # in this process this time (the fixture forked 2 workers): the same bytes
    args = [*ARGS, "--no-baselines", "--jobs", "1", "--json", "-o", str(again)]
    code, out, _ = run_cli(args, capsys)
    assert code == 0
    assert json.loads(out)["plan"] == str(again)
    assert small_plan.read_bytes() == again.read_bytes()
    # inputs are stored relative to the plan file: from the tmp folder back to the repo
    text = small_plan.read_text().replace(os.path.relpath(ROOT, small_plan.parent) + os.sep, "")
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "plan changed: review, then UPDATE_GOLDEN=1"


def test_plan_records_inputs_summary_and_points(small_plan):
    plan = load_plan(small_plan)
    assert set(plan.inputs) == {"cluster", "models", "slo", "workload"}
    assert all(len(r.sha256) == 64 for r in plan.inputs.values())
    assert plan.workload_summary["requests"] > 0
    assert plan.selected in {p.name for p in plan.points}
    models = load_models(ROOT / SMALL / "models.yaml")
    for p in plan.points:
        assert {i.model for i in p.instances} == set(models.names), "every model is served"
        assert p.name in plan.search["knobs"]


def _weights_gib(arch_name: str, quantization: str, tp: int) -> float:
    """Weights per GPU from parameter counts alone (independent of the perf model), GiB."""
    arch = resolve_arch(arch_name)
    bytes_per_param = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "awq": 0.5, "gptq": 0.5, "int4": 0.5}[
        quantization
    ]
    embed = (
        arch.vocab_size * arch.hidden_size * (1 if arch.tie_word_embeddings else 2)
    )  # kept in 16 bit
    body = arch.total_params_b * 1e9 - embed
    return (body * bytes_per_param + embed * 2.0) / tp / 1024**3


def test_points_fit_memory_rederived_from_the_catalog(small_plan):
    plan = load_plan(small_plan)
    cluster = load_cluster(ROOT / SMALL / "cluster.yaml")
    models = load_models(ROOT / SMALL / "models.yaml")
    gpu_gib = {(n.name, d): g.spec.memory_gib for n in cluster.nodes for d, g in n.gpu_list()}
    for p in plan.points:
        awake: dict = {}
        slot: dict = {}
        for inst in p.instances:
            m = models.model(inst.model)
            quant = m.variant(inst.variant).quantization
            expect = _weights_gib(m.arch.name, quant, inst.tp)
            # group scales/zeros of int4 formats and unquantized norms add a few percent
            assert inst.memory_gib.weights == pytest.approx(expect, rel=0.12), (inst.id, expect)
            assert inst.memory_gib.kv > 0
            for g in inst.gpus:
                key = (inst.node, g)
                if inst.tier == "gpu":
                    awake[key] = awake.get(key, 0.0) + inst.memory_gib.total
                else:
                    slot[key] = max(slot.get(key, 0.0), inst.memory_gib.total)
        for key, cap in gpu_gib.items():
            assert awake.get(key, 0.0) + slot.get(key, 0.0) <= cap, (p.name, key)
        assert memory_violations(p, cluster, models) == []


def test_explain_names_reasons_and_alternatives(small_plan, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, _ = run_cli(["explain", str(small_plan), "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert [m["model"] for m in data["models"]] == ["planner-7b", "coder-32b", "summarizer-8b"]
    for m in data["models"]:
        assert m["placements"] and m["reasons"] and m["alternative"]


def test_report_png(tmp_path, capsys, monkeypatch):
    from planner.cli import report

    monkeypatch.chdir(ROOT)
    drawn = []  # what the left panel plotted (the real function, its result recorded)
    real = report.front_series
    monkeypatch.setattr(report, "front_series", lambda *a: drawn.append(real(*a)) or drawn[-1])
    png = tmp_path / "r.png"
    args = [a if a != "8" else "4" for a in ARGS]
    code, out, _ = run_cli(
        [*args, "--json", "-o", str(tmp_path / "p.yaml"), "--report", str(png)], capsys
    )
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # each point is drawn beside its lru@ twin, at the twin's metrics
    (ser,) = drawn
    twins = json.loads(out)["twins"]
    assert {p for p, _, _ in ser["points"]} == {t.removeprefix("lru@") for t in twins}
    for label, warm, switch in ser["twins"]:
        assert (warm, switch) == (twins[label]["warm_gpu_gib"], twins[label]["switch_p95_s"])


def test_nothing_fits_exits_2_naming_model_footprint_and_fixes(tmp_path, capsys):
    (tmp_path / "cluster.yaml").write_text(
        yaml.safe_dump(
            {
                "kind": "cluster",
                "nodes": [
                    {
                        "name": "box",
                        "cpu_memory_gib": 128,
                        "gpus": [{"type": "RTX-3090", "count": 2}],
                    }
                ],
            }
        )
    )
    (tmp_path / "models.yaml").write_text(
        yaml.safe_dump(
            {
                "kind": "models",
                "models": [
                    {
                        "name": "big",
                        "architecture": "Llama-3.1-70B-Instruct",
                        "variants": [{"name": "bf16", "quantization": "bf16"}],
                    }
                ],
            }
        )
    )
    (tmp_path / "slo.yaml").write_text("kind: slo\n")
    (tmp_path / "w.yaml").write_text("users: 2\ndays: 1\nroles: {planner: {model: big}}\n")
    argv = _optimize(*(tmp_path / f for f in ("cluster.yaml", "models.yaml", "slo.yaml", "w.yaml")))
    code, _, err = run_cli([*argv, "-o", tmp_path / "p.yaml"], capsys)
    assert code == 2
    assert "model 'big' fits on no GPU" in err
    assert "box: 2xRTX-3090" in err and "at tp=2" in err and "GiB per GPU" in err
    assert "add an fp8 or int4 variant of big" in err
    assert not (tmp_path / "p.yaml").exists()


def test_unmeetable_slo_still_writes_closest_points_and_names_the_binding_target(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(ROOT)
    (tmp_path / "slo.yaml").write_text(
        "kind: slo\ndefault: {ttft_p95_s: 0.05, tpot_p95_s: 0.15}\nattainment: 0.99\n"
    )
    out = tmp_path / "p.yaml"
    args = [a if a != f"{SMALL}/slo.yaml" else str(tmp_path / "slo.yaml") for a in ARGS]
    args = [a if a != "8" else "5" for a in args]
    code, stdout, _ = run_cli([*args, "--no-baselines", "--json", "-o", str(out)], capsys)
    assert code == 0
    notes = json.loads(stdout)["notes"]
    assert any("no plan meets the attainment target" in n and "ttft_p95_s" in n for n in notes)
    plan = load_plan(out)
    assert plan.points and all(p.notes == notes for p in plan.points)


def test_demand_above_capacity_exits_2_naming_the_model(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    (tmp_path / "c.yaml").write_text(
        "kind: cluster\nnodes:\n  - name: box\n    cpu_memory_gib: 64\n"
        "    gpus: [{type: L40S, count: 1}]\n"
    )
    (tmp_path / "w.yaml").write_text("users: 400\ndays: 1\nroles: {coder: {model: coder-32b}}\n")
    argv = _optimize(
        tmp_path / "c.yaml", f"{SMALL}/models.yaml", f"{SMALL}/slo.yaml", tmp_path / "w.yaml"
    )
    code, _, err = run_cli([*argv, "--evals", "4", "-o", tmp_path / "p.yaml"], capsys)
    assert code == 2
    assert "coder-32b: peak" in err and "req/s per instance" in err
    assert not (tmp_path / "p.yaml").exists()
