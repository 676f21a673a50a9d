"""A model whose peak hour is within capacity but whose TTFT P95 misses its target: evaluate
says why (issue 32 item 4): waking it, bursts, long prompts. Before, the capacity report
stayed silent (it is printed only when an hour is over), and the per-model table showed a
TTFT of 81 s beside a model the capacity check called fine."""

from __future__ import annotations

import json

import adjust_helpers as h
import pytest

from planner.cli.main import main
from planner.optimizer.capacity import why_slow


def _run(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0), " ".join(capsys.readouterr().out.split())


def test_evaluate_says_why_a_model_within_capacity_misses_ttft(tmp_path, capsys):
    tr = h.adoption_trace(days=2, adoption_day=1)  # `shared` time-shares one GPU: it thrashes
    plan_file = h.write_inputs(tmp_path, h.shared_split_plan(h.reference(tr)))
    trace = tmp_path / "trace.csv"
    tr.to_csv(trace, index=False)
    code, out = _run(["evaluate", plan_file, "--workload", str(trace), "--json"], capsys)
    got = json.loads(out)
    cap = got["capacity"]["shared"]
    assert code == 0 and not cap["overloaded"]  # every hour within capacity ...
    coder = got["points"]["shared"]["per_model"]["coder-32b"]
    assert coder["ttft_p95_s"] > 5.0  # ... and yet far past its 5 s TTFT target
    why = cap["slow_within_capacity"]["coder-32b"]
    assert "within capacity" in why and "waking it (switch P95" in why
    assert "busiest minute had" in why and "prompt has" in why
    code, out = _run(["evaluate", plan_file, "--workload", str(trace)], capsys)
    assert "note: shared: coder-32b: TTFT P95" in out and "an hourly average" in out


def test_why_slow_counts_the_busiest_minute_and_the_prompts():
    trace = {
        "timestamp": [0.0, 1.0, 2.0, 3.0, 1800.0, 3000.0],
        "model": ["a"] * 6,
        "input_tokens": [1000] * 6,
        "cached_tokens": [200] * 6,
    }
    text = why_slow(trace, "a")
    assert "busiest minute had 4 requests, 40x" in text and "800 tokens to prefill" in text
