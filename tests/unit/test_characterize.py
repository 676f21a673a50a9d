"""Workload characterization: exact figures on a hand-built trace, and robustness."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_helpers import rows_trace

from planner.optimizer.workload.characterize import IDLE_GRID_S, js_divergence, summarize
from planner.optimizer.workload.drift import drift
from planner.trace.frame import normalize


@pytest.fixture
def tiny():
    # Session s1: a -> b -> a ; session s2: a, a (one user each). Hour 9 and hour 10.
    return normalize(
        pd.DataFrame(
            {
                "timestamp": [
                    9 * 3600 + 0.0,
                    9 * 3600 + 10,
                    9 * 3600 + 100,
                    9 * 3600 + 20,
                    10 * 3600 + 20,
                ],
                "model": ["a", "b", "a", "a", "a"],
                "input_tokens": [100, 200, 300, 50, 60],
                "output_tokens": [10, 20, 30, 5, 6],
                "user": ["u1", "u1", "u1", "u2", "u2"],
                "session": ["s1", "s1", "s1", "s2", "s2"],
                "cached_tokens": [0, 0, 110, 0, 55],
            }
        )
    )


def test_exact_figures(tiny):
    s = summarize(tiny, full=True)
    assert s["requests"] == 5 and s["models"] == ["a", "b"] and s["sessions"] == 2
    assert s["mix"] == {"a": 0.8, "b": 0.2}
    # Hand-offs within sessions: s1 a->b, b->a ; s2 a->a.
    assert s["switch"]["counts"] == [[1, 1], [1, 0]]
    assert s["switch"]["rate"] == pytest.approx(2 / 3)
    assert s["switch_per_user"] == {"u1": [[0, 1], [1, 0]], "u2": [[1, 0], [0, 0]]}
    # The trace spans clock hours 9 and 10 once each.
    assert s["rate_per_hour_of_day"]["a"][9] == 3 and s["rate_per_hour_of_day"]["a"][10] == 1
    assert s["peak"]["a"]["hour_of_day"] == 9
    assert s["peak"]["a"]["requests_per_s"] == pytest.approx(3 / 3600, rel=1e-5)
    assert s["peak"]["a"]["input_tokens_per_s"] == pytest.approx(450 / 3600, rel=1e-5)
    assert s["prefix"]["a"]["reuse_ratio"] == pytest.approx(165 / 510, rel=1e-5)
    # s1's second call to a comes 100 s after its first; s2's 3600 s after.
    assert s["prefix"]["a"]["reuse_distance_s_p50_p95"][0] == pytest.approx(1850)
    # Model a's own gaps: 20, 80, 3520 s; the first request always counts as after idle.
    idle = dict(
        zip(s["idle_arrivals_per_hour"]["idle_s"], s["idle_arrivals_per_hour"]["a"], strict=True)
    )
    hours = s["duration_s"] / 3600
    assert idle[10] == pytest.approx(4 / hours, rel=1e-5)
    assert idle[60] == pytest.approx(3 / hours, rel=1e-5)
    assert idle[3600] == pytest.approx(1 / hours, rel=1e-5)
    # 60 s windows with traffic: [0,60): a,b and a(s2) -> 2 models, 2 sessions; 100 s: 1; 10 h: 1.
    assert s["concurrency"]["models_active_cdf"] == [0.0, pytest.approx(2 / 3, abs=1e-3), 1.0]
    assert s["concurrency"]["sessions_active_cdf"] == [0.0, pytest.approx(2 / 3, abs=1e-3), 1.0]
    assert list(IDLE_GRID_S) == s["idle_arrivals_per_hour"]["idle_s"]


def test_summary_is_plain_data(tiny):
    s = summarize(tiny)
    assert json.loads(json.dumps(s)) == s
    assert yaml.safe_load(yaml.safe_dump(s)) == s


def test_noise_of_a_week():
    from planner.optimizer.workload.synth import synth
    from planner.optimizer.workload.synth_spec import default_spec

    s = summarize(synth(default_spec().model_copy(update={"stationary": True}), seed=0))
    assert s["noise"]["hours"] > 50
    assert 1.0 <= s["noise"]["mix"] < 3.0
    a, b = s["noise"]["rate"]["coder-32b"]
    assert a > 1 and b >= 0  # bursts of requests, more than Poisson


def test_js_divergence_bounds():
    assert js_divergence([1, 0], [1, 0]) == 0.0
    assert js_divergence([1, 0], [0, 1]) == pytest.approx(np.log(2))
    assert 0 < js_divergence([3, 1], [1, 3]) < np.log(2)


frames = st.lists(
    st.tuples(
        st.floats(0, 3 * 86400, allow_nan=False),
        st.sampled_from(["a", "b", "c"]),
        st.integers(1, 5000),
        st.integers(1, 500),
        st.sampled_from(["", "u1", "u2"]),
        st.sampled_from(["", "s1", "s2", "s3"]),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=40, deadline=None)
@given(rows=frames)
def test_property_any_trace(rows):
    df = rows_trace(rows, cached_div=3)
    s = summarize(df, full=True)
    assert json.loads(json.dumps(s)) == s
    assert sum(s["mix"].values()) == pytest.approx(1.0, abs=1e-4)
    assert sum(map(sum, s["switch"]["counts"])) <= len(df) - 1
    assert s["concurrency"]["models_active_cdf"][-1] == 1.0
    rep = drift(s, df)
    assert rep.verdict in ("stable", "drift", "too_few_requests")
