"""Agent-traffic generator: determinism, invariants, the traffic shape the spec asks for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from planner.optimizer.workload.synth import synth
from planner.optimizer.workload.synth_spec import (
    DEFAULT_ROLE_MODELS,
    SynthSpec,
    bind_models,
    default_spec,
    default_spec_yaml,
)
from planner.trace.frame import COLUMNS, DTYPES, normalize
from planner.trace.write import trace_bytes


@pytest.fixture(scope="module")
def week():
    return synth(default_spec(), seed=7)


def test_canonical_frame(week):
    assert list(week.columns) == COLUMNS
    assert {c: str(t) for c, t in week.dtypes.items()} == {c: DTYPES[c] for c in COLUMNS}
    # normalize() accepts it unchanged: it is already a valid canonical trace
    pd.testing.assert_frame_equal(normalize(week), week)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_same_seed_same_bytes(suffix):
    spec = default_spec().model_copy(update={"users": 4, "days": 2})
    a = trace_bytes(synth(spec, seed=3), suffix)
    b = trace_bytes(synth(spec, seed=3), suffix)
    assert a == b
    assert a != trace_bytes(synth(spec, seed=4), suffix)


def test_invariants(week):
    ts = week["timestamp"].to_numpy()
    assert np.all(np.diff(ts) >= 0)
    assert ts.min() >= 0 and ts.max() < 7 * 86400
    assert (week["cached_tokens"] <= week["input_tokens"]).all()
    assert (week["input_tokens"] >= 1).all() and (week["output_tokens"] >= 1).all()
    assert (week["input_tokens"] <= default_spec().max_input_tokens).all()
    assert set(week["model"].unique()) == set(DEFAULT_ROLE_MODELS.values())
    assert week["user"].nunique() == 10


def test_working_hours_weekends_and_lunch(week):
    hour = (week["timestamp"] // 3600 % 24).to_numpy()
    day = (week["timestamp"] // 86400).to_numpy()
    assert (hour < 6).mean() < 0.01  # nights are quiet
    weekday = np.bincount(day.astype(int), minlength=7)
    assert weekday[5:].sum() < 0.15 * weekday[:5].sum()  # 2026-01-05 is a Monday
    per_hour = np.bincount(hour.astype(int), minlength=24)
    assert per_hour[12] < 0.8 * max(per_hour[10], per_hour[15])  # lunch dip


def test_context_growth_and_prefix_cache(week):
    # Within one session on one model, later calls carry the earlier context as cached prefix.
    g = week[week["model"] == "coder-32b"].groupby("session", sort=False)
    firsts = g.head(1)
    assert (firsts["cached_tokens"] == 0).all()
    reuse = week["cached_tokens"].sum() / week["input_tokens"].sum()
    assert 0.3 < reuse < 0.95
    assert (week[week["model"] == "embed-small"]["cached_tokens"] == 0).all()


def test_drift_adoption_and_group_switch(week):
    day = week["timestamp"] // 86400
    reasoner = week["model"] == "reasoner-30b"
    assert not (reasoner & (day < 2)).any()  # adopted on day 2
    assert (reasoner & (day >= 2)).sum() > 100
    share_late = reasoner[(day >= 4) & (day < 5)].mean()
    share_mid = reasoner[(day >= 2) & (day < 4)].mean()
    assert share_late > share_mid  # a group of users moved its coding onto it on day 4


def test_stationary_has_no_drift():
    spec = default_spec().model_copy(update={"stationary": True, "days": 7})
    df = synth(spec, seed=2)
    day = (df["timestamp"] // 86400).astype(int)
    counts = np.bincount(day, minlength=7)
    assert counts.min() > 0.4 * counts.max()  # weekends like weekdays
    shares = pd.crosstab(day, df["model"], normalize="index")
    assert (shares.max() - shares.min()).max() < 0.15
    assert (df.loc[day < 2, "model"] == "reasoner-30b").any()


def test_bind_models_remaps_in_order():
    spec, notes = bind_models(default_spec(), ["a", "b", "c"])
    assert [r.model for r in spec.roles.values()] == ["a", "b", "c", "a", "b", "c"]
    assert "in order" in notes[0]
    lab, notes3 = bind_models(
        default_spec(), [*list(DEFAULT_ROLE_MODELS.values())[:5], "chat-24b", "tools-20b"]
    )
    assert lab.roles["embed"].model == "chat-24b" and lab.roles["coder"].model == "coder-32b"
    assert notes3[-1] == "models with no role (no traffic): ['tools-20b']"
    same, notes2 = bind_models(default_spec(), [*DEFAULT_ROLE_MODELS.values(), "extra"])
    assert same == default_spec()
    assert notes2 == ["models with no role (no traffic): ['extra']"]
    df = synth(spec.model_copy(update={"users": 2, "days": 1}), seed=0)
    assert set(df["model"].unique()) <= {"a", "b", "c"}


def test_spec_yaml_documented_and_loadable():
    text = default_spec_yaml()
    assert text.count("\n# ") >= len(SynthSpec.model_fields)
    assert SynthSpec.model_validate(yaml.safe_load(text)) == default_spec()


@pytest.mark.parametrize(
    "bad",
    [
        {"users": 0},
        {"transitions": {"nobody": {"end": 1.0}}},
        {"start_role": {"coder": -1.0}},
        {"adopted_role": "poet"},
        {"work_start_hour": 18, "work_end_hour": 9},
        {"surprise": 1},
    ],
)
def test_spec_validation(bad):
    with pytest.raises(ValidationError):
        SynthSpec.model_validate({**default_spec().model_dump(), **bad})


@settings(max_examples=15, deadline=None)
@given(
    users=st.integers(1, 6),
    days=st.integers(1, 3),
    seed=st.integers(0, 2**31),
    stationary=st.booleans(),
    tz=st.lists(st.floats(-12, 14), min_size=1, max_size=3),
)
def test_property_invariants(users, days, seed, stationary, tz):
    spec = default_spec().model_copy(
        update={"users": users, "days": days, "stationary": stationary, "timezones_h": tz}
    )
    df = synth(spec, seed=seed)
    if len(df) == 0:
        return
    ts = df["timestamp"].to_numpy()
    assert np.all(np.diff(ts) >= 0) and ts.min() >= 0 and ts.max() < days * 86400
    assert (df["cached_tokens"] <= df["input_tokens"]).all()
    assert (df["cached_tokens"] >= 0).all() and (df["output_tokens"] >= 1).all()
    assert df["user"].nunique() <= users


def test_time_zones_shift_working_hours():
    spec = default_spec().model_copy(
        update={"users": 6, "days": 2, "stationary": True, "timezones_h": [0.0, -6.0]}
    )
    df = synth(spec, seed=1)
    hour = df["timestamp"] // 3600 % 24
    west = df["user"].isin(["u01", "u03", "u05"])  # round-robin: odd users are UTC-6
    assert hour[west].median() - hour[~west].median() >= 4


def test_prompt_plus_output_within_each_models_context(week):
    # the default week has prompts up to 32768 tokens; two models get smaller contexts
    assert (week["input_tokens"] + week["output_tokens"]).max() > 8192
    limits = {"coder-32b": 8192, "planner-7b": 4096}
    df = synth(default_spec(), seed=7, max_context=limits)
    total = df["input_tokens"] + df["output_tokens"]
    for m, ctx in limits.items():
        assert total[df["model"] == m].max() <= ctx
    assert (df["input_tokens"] >= 1).all() and (df["cached_tokens"] <= df["input_tokens"]).all()
    other = df["model"].isin(limits.keys())  # models without a limit keep their lengths
    assert df.loc[~other, "input_tokens"].equals(week.loc[~other.values, "input_tokens"])
