"""Two apply findings of issue 14: a plan's input paths work from any folder, and a start
that a killed apply left behind is started again without counting as a crash."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from apply_fakes import FakeBackend, inst, plan, run

from planner.adjuster.state import InstanceRow, StateStore
from planner.cli.main import main
from planner.planfile import write_plan
from planner.schemas import load_plan

ROOT = Path(__file__).resolve().parents[2]
SMALL = "tests/data/small"


def _main(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0), capsys.readouterr().out


def test_a_plan_made_in_one_folder_applies_from_another(tmp_path, capsys, monkeypatch):
    out = tmp_path / "plans" / "small.plan.yaml"
    monkeypatch.chdir(ROOT)  # optimize with paths relative to the repo, as a user types them
    code, _ = _main(
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
            "2",
            "--no-baselines",
            "--json",
            "-o",
            str(out),
        ],
        capsys,
    )
    assert code == 0
    for key, ref in load_plan(out).inputs.items():  # stored relative to the plan file
        assert not Path(ref.path).is_absolute()
        assert (out.parent / ref.path).resolve() == (ROOT / SMALL / f"{key}.yaml").resolve()
    # Every instance of the selected point always awake, so that the dry run starts them
    # (a lazy one is not started where the backend has no sleep mode, as on this machine).
    p = load_plan(out)
    sel = p.point()
    sel.instances = [i.model_copy(update={"tier": "gpu", "awake_hours": []}) for i in sel.instances]
    write_plan(out, p)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    here = sel.instances[0].node  # this CPU host stands in for the plan's GPU node
    code, text = _main(
        ["apply", str(out), "--dry-run", "--json", "--state-dir", "s", "--node", here], capsys
    )
    assert code == 0, text
    assert json.loads(text)["actions"]


def test_a_start_left_by_a_killed_apply_is_not_a_crash(tmp_path):
    p = plan(("a", [inst("x-0", 8100)]))
    be, st = FakeBackend(), StateStore(tmp_path)
    st.upsert(
        InstanceRow(
            id="x-0",
            model="m",
            variant="bf16",
            node="n",
            port=8100,
            status="starting",
            pid=os.getpid() + 10**6,
            gpus="[0]",
        )
    )
    res = run(p, "a", be, st)
    # its row first becomes what runs (nothing: `start interrupted`), then it is started
    assert res.ok and [(a.action, a.result) for a in res.actions] == [("start", "ok")]
    assert st.get("x-0").restarts == 0 and st.get("x-0").status == "awake"
    lines = [(j["action"], j["result"]) for j in st.journal_entries()]
    assert lines == [("start", "interrupted"), ("start", "ok")]
