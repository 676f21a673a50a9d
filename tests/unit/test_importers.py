"""Importers: real Azure files, and small files of every other format with malformed rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InputError
from planner.trace.frame import COLUMNS
from planner.trace.importers import import_trace, parse_assign

DATA = Path(__file__).resolve().parents[1] / "data"
MODELS = ["coder-32b", "planner-7b", "summarizer-8b"]


@pytest.mark.parametrize(("name", "rows"), [("code", 8819), ("conv", 19366)])
def test_azure_row_counts(name, rows):
    df, s = import_trace(
        "azure", DATA / f"AzureLLMInferenceTrace_{name}.csv", model_names=MODELS, assign="hash"
    )
    assert len(df) == rows == s.rows_read == s.rows_kept
    assert s.skipped == {}
    assert list(df.columns) == COLUMNS
    assert set(df["model"].unique()) == set(MODELS)
    # One hour of traffic that started 2023-11-16 18:1x UTC.
    ts = df["timestamp"].to_numpy()
    assert 18 * 3600 <= ts.min() < 19 * 3600 and ts.max() - ts.min() < 3700
    assert df["session"].nunique() == rows  # no sessions in the format: one per request


def test_azure_hash_is_stable_and_mix_is_seeded():
    src = DATA / "AzureLLMInferenceTrace_code.csv"
    a, _ = import_trace("azure", src, model_names=MODELS, assign="hash")
    b, _ = import_trace("azure", src, model_names=MODELS, assign="hash")
    assert a.equals(b)
    m1, _ = import_trace(
        "azure", src, model_names=MODELS, assign="coder-32b=0.8,planner-7b=0.2", seed=1
    )
    m2, _ = import_trace(
        "azure", src, model_names=MODELS, assign="coder-32b=0.8,planner-7b=0.2", seed=1
    )
    assert m1.equals(m2)
    share = (m1["model"] == "coder-32b").mean()
    assert 0.77 < share < 0.83


def test_azure_malformed_rows(tmp_path):
    p = tmp_path / "az.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,4808,10\n"
        "not-a-time,10,10\n"
        "2023-11-16 18:17:05.0,12.5,10\n"
        "2023-11-16 18:17:06.0,100,0\n"
        "2023-11-16 18:17:07.0,-3,5\n"
        "2023-11-16 18:17:08.0,,5\n"
        "2023-11-16 18:17:09.0,50,7\n"
    )
    df, s = import_trace("azure", p, assign="a=1")
    assert s.rows_read == 7 and s.rows_kept == 2 == len(df)
    assert s.skipped == {
        "input_tokens not a whole number": 2,
        "negative token count": 1,
        "timestamp missing or unreadable": 1,
        "zero output tokens (failed request)": 1,
    }


def test_mooncake_cached_from_seen_blocks(tmp_path):
    p = tmp_path / "mc.jsonl"
    lines = [
        {"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [1, 2, 3]},
        {"timestamp": 1000, "input_length": 2000, "output_length": 5, "hash_ids": [1, 2, 4, 5]},
        {"timestamp": 1500, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]},  # cap
        {
            "timestamp": 2000,
            "input_length": 900,
            "output_length": 5,
            "hash_ids": [9, 1],
        },  # no prefix
        "{broken",
        {"timestamp": 2500, "input_length": 100},
        {"timestamp": 3000, "input_length": 100, "output_length": 0, "hash_ids": []},
        {"timestamp": "soon", "input_length": 100, "output_length": 3, "hash_ids": []},
    ]
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    df, s = import_trace("mooncake", p, model_names=MODELS, assign="hash")
    assert df["timestamp"].tolist() == [0.0, 1.0, 1.5, 2.0]
    assert df["cached_tokens"].tolist() == [0, 1024, 700, 0]
    assert s.rows_read == 8 and s.rows_kept == 4
    assert s.skipped == {
        "invalid JSON": 1,
        "missing timestamp/input_length/output_length": 1,
        "timestamp/lengths not numbers": 1,
        "zero output tokens (failed request)": 1,
    }


def test_burstgpt(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text(
        "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,s1,1.2,ChatGPT,100,20,120,Conversation log\n"
        "6,s1,1.0,GPT-4,80,0,80,Conversation log\n"
        "7,s2,1.0,ChatGPT,x,10,10,API log\n"
        "8,s2,1.0,,10,10,20,API log\n"
        "9,s3,0.5,GPT-4,30,3,33,API log\n"
    )
    df, s = import_trace("burstgpt", p)
    assert df["model"].tolist() == ["ChatGPT", "GPT-4"]
    assert df["session"].tolist() == ["s1", "s3"]
    assert s.skipped == {
        "input_tokens not a whole number": 1,
        "model missing": 1,
        "zero output tokens (failed request)": 1,
    }
    mapped, _ = import_trace("burstgpt", p, model_names=MODELS, assign="hash")
    assert set(mapped["model"]) <= set(MODELS)
    with pytest.raises(InputError, match="not in the models file"):
        import_trace("burstgpt", p, model_names=MODELS)


def test_servegen_windows_and_rates(tmp_path):
    d = tmp_path / "clients"
    d.mkdir()
    (d / "alice.csv").write_text(
        "0,2.0,1.0,exponential,,\n"
        "600,1.0,2.0,gamma,2000,100\n"
        "1200,0.5,0.5,weibull,500,50\n"
        "1800,1.0,1.5,lognormal,,\n"
        "2400,1.0,1.0,pareto,,\n"
        "oops,1,1,gamma,,\n"
        "3000,0,1,gamma,,\n"
    )
    (d / "bob.csv").write_text("0,0.2,1.0,poisson,100,10\n")
    df, s = import_trace("servegen", d, model_names=MODELS, assign="hash", seed=5)
    assert s.rows_read == 8
    assert s.skipped == {
        "unknown distribution 'pareto'": 1,
        "window_start_s/rate/cv not numbers": 1,
    }
    alice = df[df["user"] == "alice"]["timestamp"].to_numpy()
    counts = np.histogram(alice, bins=[0, 600, 1200, 1800, 2400, 3600])[0]
    expect = np.array([1200, 600, 300, 600, 0])
    assert np.all(np.abs(counts - expect) <= 5 * np.sqrt(expect * 4) + 1)
    w2 = df[(df["user"] == "alice") & (df["timestamp"] >= 600) & (df["timestamp"] < 1200)]
    assert 1400 < w2["input_tokens"].mean() < 2700  # lognormal around param1 = 2000
    again, _ = import_trace("servegen", d, model_names=MODELS, assign="hash", seed=5)
    assert again.equals(df)
    # Per client, gaps > 300 s split sessions; bob is one client with a few requests.
    assert df[df["user"] == "bob"]["session"].str.startswith("bob-g").all()


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_own_formats_skip_bad_rows(tmp_path, suffix):
    rows = [
        {"timestamp": 1.0, "model": "coder-32b", "input_tokens": 10, "output_tokens": 2},
        {"timestamp": 2.0, "model": "coder-32b", "input_tokens": -1, "output_tokens": 2},
        {"timestamp": 3.0, "model": "", "input_tokens": 10, "output_tokens": 2},
        {
            "timestamp": 4.0,
            "model": "planner-7b",
            "input_tokens": 10,
            "output_tokens": 2,
            "cached_tokens": 11,
        },
        {
            "timestamp": 5.0,
            "model": "planner-7b",
            "input_tokens": 10,
            "output_tokens": 2,
            "cached_tokens": 4,
        },
    ]
    p = tmp_path / f"t.{suffix}"
    if suffix == "csv":
        import pandas as pd

        pd.DataFrame(rows).to_csv(p, index=False)
    else:
        p.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    df, s = import_trace(suffix, p, model_names=MODELS)
    assert df["timestamp"].tolist() == [1.0, 5.0]
    assert df["cached_tokens"].tolist() == [0, 4]
    want = {"cached_tokens > input_tokens": 1, "model missing": 1, "negative token count": 1}
    if suffix == "jsonl":
        want["invalid JSON"] = 1
    assert s.skipped == want
    assert s.rows_kept + sum(s.skipped.values()) == s.rows_read


def test_parquet_roundtrip_import(tmp_path):
    from planner.optimizer.workload.synth import synth
    from planner.optimizer.workload.synth_spec import default_spec
    from planner.trace.write import write_trace

    df = synth(default_spec().model_copy(update={"users": 2, "days": 1}), seed=1)
    p = tmp_path / "t.parquet"
    write_trace(df, p)
    back, s = import_trace("parquet", p)
    assert back.equals(df) and s.skipped == {}


def test_assign_errors():
    with pytest.raises(InputError, match="needs the models"):
        parse_assign("hash", None)
    with pytest.raises(InputError, match="cannot read"):
        parse_assign("coder-32b=lots", MODELS)
    with pytest.raises(InputError, match="not in the models file"):
        parse_assign("gpt=1", MODELS)
    assert parse_assign("coder-32b=1,planner-7b=3", MODELS) == (
        "mix",
        {"coder-32b": 1.0, "planner-7b": 3.0},
    )


def test_format_without_model_needs_a_rule():
    with pytest.raises(InputError, match="no model column"):
        import_trace("azure", DATA / "AzureLLMInferenceTrace_code.csv")
    with pytest.raises(InputError, match="unknown format"):
        import_trace("sharegpt", DATA / "AzureLLMInferenceTrace_code.csv")


cells = st.one_of(
    st.integers(-5, 5000).map(str),
    st.floats(-10, 1e5).map(str),
    st.just("nan"),
    st.sampled_from(["", "x", "1e3", "2023-11-16 18:17:03", "-0"]),
)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(cells, cells, cells), min_size=1, max_size=25))
def test_property_azure_accounts_for_every_row(tmp_path_factory, rows):
    p = tmp_path_factory.mktemp("az") / "t.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)
    )
    try:
        df, s = import_trace("azure", p, assign="m=1")
    except InputError as e:
        # all rows unusable, or epoch seconds mixed with dates (a span past the bound)
        assert "no usable requests" in str(e) or "a trace spans at most" in str(e)
        return
    assert s.rows_read == len(rows)
    assert s.rows_kept + sum(s.skipped.values()) == s.rows_read
    assert (df["input_tokens"] >= 1).all() and (df["output_tokens"] >= 1).all()
