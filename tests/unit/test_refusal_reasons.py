"""Every report says why the simulator counted a request unserved (issue 32 item 4):
`evaluate` (table and JSON), `adjust --replay` (table and JSON). Before, evaluate's table
said only "unserved MODEL: N", and the replay's figures counted no refusals at all."""

from __future__ import annotations

import json

import adjust_helpers as h
import pytest

from planner.cli.main import main
from planner.cli.tables import refusal_text


def _run(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0), " ".join(capsys.readouterr().out.split())


@pytest.fixture(scope="module")
def long_prompts():
    """The adoption trace, every 50th prompt past the plan's max_model_len (32768): with
    those the synthetic prompts already at 32768 tokens leave no room for an output."""
    tr = h.adoption_trace(days=2, adoption_day=1).reset_index(drop=True)
    tr.loc[tr.index[::50], "input_tokens"] = 40000
    ref = h.reference(tr[tr["timestamp"] < 86400.0])
    return tr, h.shared_split_plan(ref), int((tr["input_tokens"] >= 32768).sum())


def test_refusal_text_names_every_reason():
    text = refusal_text({"over_context": 8, "refused_queue_full": 4, "no_instance": 0})
    assert text == "12 refused (8 prompt longer than max_model_len, 4 queue full)"
    assert refusal_text({"over_context": 0}) == "" and refusal_text(None) == ""


def test_evaluate_and_replay_name_why_requests_were_refused(tmp_path, capsys, long_prompts):
    tr, p, n_long = long_prompts
    plan_file = h.write_inputs(tmp_path, p)
    trace = tmp_path / "trace.csv"
    tr.to_csv(trace, index=False)
    why = f"{n_long} refused ({n_long} prompt longer than max_model_len)"
    code, out = _run(["evaluate", plan_file, "--workload", str(trace)], capsys)
    assert code == 0 and f"shared: {why}" in out and "planner-7b: " in out  # per model too
    code, out = _run(["evaluate", plan_file, "--workload", str(trace), "--json"], capsys)
    assert json.loads(out)["points"]["shared"]["refused"]["over_context"] == n_long
    replay = ["adjust", "--plan", plan_file, "--replay", str(trace)]
    code, out = _run(replay, capsys)
    assert code == 0 and f"adjusted: {why}" in out and f"static split (baseline): {why}" in out
    code, out = _run([*replay, "--json"], capsys)
    got = json.loads(out)
    assert got["adjusted"]["refused"]["over_context"] == n_long
    assert got["static"]["shared"]["refused"]["over_context"] == n_long
