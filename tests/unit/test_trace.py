"""Trace schema: reading, validation errors, canonical form, deterministic writing."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_helpers import rows_trace

from planner.errors import InputError
from planner.trace.frame import (
    COLUMNS,
    DTYPES,
    TRACE_JSON_SCHEMA,
    normalize,
    read_trace,
)
from planner.trace.write import trace_bytes, write_trace


def _frame(**over):
    base = {
        "timestamp": [2.0, 0.5, 1.0],
        "model": ["coder-32b", "planner-7b", "coder-32b"],
        "input_tokens": [100, 20, 50],
        "output_tokens": [10, 5, 7],
    }
    base.update(over)
    return pd.DataFrame(base)


def test_normalize_sorts_fills_and_types():
    df = normalize(_frame())
    assert list(df.columns) == COLUMNS
    assert {c: str(t) for c, t in df.dtypes.items()} == {c: DTYPES[c] for c in COLUMNS}
    assert df["timestamp"].tolist() == [0.5, 1.0, 2.0]
    assert df["user"].tolist() == ["", "", ""]
    assert df["cached_tokens"].tolist() == [0, 0, 0]
    assert df.index.tolist() == [0, 1, 2]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_roundtrip_and_bytes_deterministic(tmp_path, suffix):
    df = normalize(
        _frame(user=["a", "b", "a"], session=["s1", "s2", "s1"], cached_tokens=[0, 0, 30])
    )
    p1, p2 = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    write_trace(df, p1)
    write_trace(df.copy(), p2)
    assert p1.read_bytes() == p2.read_bytes()
    back = read_trace(p1)
    pd.testing.assert_frame_equal(back, df)
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write leaves no temp file


def test_iso_timestamps_keep_hour_of_day(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(
        "timestamp,model,input_tokens,output_tokens\n"
        "2026-01-05T09:00:00Z,m,10,1\n2026-01-05T09:00:30Z,m,10,1\n"
    )
    df = read_trace(p)
    assert df["timestamp"].tolist() == [9 * 3600.0, 9 * 3600.0 + 30]


def test_sqlite_request_log(tmp_path):
    p = tmp_path / "requests.sqlite"
    con = sqlite3.connect(p)
    con.execute(
        "CREATE TABLE requests (timestamp REAL, user TEXT, session TEXT, model TEXT, "
        "input_tokens INT, output_tokens INT, cached_tokens INT, ttft_s REAL)"
    )
    day = 20000 * 86400.0
    con.executemany(
        "INSERT INTO requests VALUES (?,?,?,?,?,?,?,?)",
        [(day + 3600.5, "u", "s", "m", 10, 2, 4, 0.1), (day + 3500.0, "u", "s", "m", 8, 1, 0, 0.1)],
    )
    con.commit()
    con.close()
    df = read_trace(p)
    assert df["timestamp"].tolist() == [3500.0, 3600.5]  # epoch -> since 00:00 of day 0
    assert df["cached_tokens"].tolist() == [0, 4]


def test_sqlite_without_requests_table(tmp_path):
    p = tmp_path / "x.db"
    sqlite3.connect(p).close()
    with pytest.raises(InputError, match="no table 'requests'"):
        read_trace(p)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("timestamp,model,input_tokens\n1,m,3\n", r"missing column\(s\) \['output_tokens'\]"),
        (
            "timestamp,model,input_tokens,output_tokens\n1,m,abc,3\n",
            r"row 1 \(line 2\), column 'input_tokens'",
        ),
        (
            "timestamp,model,input_tokens,output_tokens\n1,m,3,2\n2,m,-4,3\n",
            r"row 2 \(line 3\), column 'input_tokens': -4 is below 1",
        ),
        (
            "timestamp,model,input_tokens,output_tokens\n1,m,3,0\n",
            r"column 'output_tokens': 0 is below 1",
        ),
        ("timestamp,model,input_tokens,output_tokens\nyesterday,m,3,1\n", r"neither a number"),
        (
            "timestamp,model,input_tokens,output_tokens,cached_tokens\n1,m,3,1,5\n",
            r"exceeds input_tokens",
        ),
        ("", "the file is empty"),
        ("timestamp,model,input_tokens,output_tokens\n", "no requests"),
    ],
)
def test_located_errors(tmp_path, text, match):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(InputError, match=match) as e:
        read_trace(p)
    assert str(p) in str(e.value)
    assert e.value.fix


def test_unknown_model_lists_catalog(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [{"timestamp": 0, "model": "gpt-9", "input_tokens": 3, "output_tokens": 1}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError) as e:
        read_trace(p, model_names=["coder-32b", "planner-7b"])
    msg = str(e.value)
    assert "['gpt-9']" in msg and "coder-32b" in msg and "--assign" in msg


def test_bad_jsonl_line_and_unknown_suffix(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0}\n{oops\n')
    with pytest.raises(InputError, match="line 2: not valid JSON"):
        read_trace(p)
    q = tmp_path / "t.txt"
    q.write_text("x")
    with pytest.raises(InputError, match="unknown trace format"):
        read_trace(q)
    with pytest.raises(InputError, match="file not found"):
        read_trace(tmp_path / "missing.csv")


def test_schema_names_columns():
    assert TRACE_JSON_SCHEMA["required"] == ["timestamp", "model", "input_tokens", "output_tokens"]
    assert set(TRACE_JSON_SCHEMA["properties"]) == set(COLUMNS)


rows = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=1e7, allow_nan=False),
        st.sampled_from(["a", "b-1", "ü"]),
        st.integers(1, 10**6),
        st.integers(1, 10**5),
        st.text(alphabet="xyz,\"' ", max_size=4),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(rows=rows, suffix=st.sampled_from([".csv", ".jsonl", ".parquet"]))
def test_property_roundtrip(tmp_path_factory, rows, suffix):
    df = rows_trace(rows, cached_div=2)
    assert np.all(np.diff(df["timestamp"].to_numpy()) >= 0)
    p = tmp_path_factory.mktemp("rt") / f"t{suffix}"
    write_trace(df, p)
    back = read_trace(p)
    pd.testing.assert_frame_equal(back, df)
    assert trace_bytes(back, suffix) == p.read_bytes()


def test_write_makes_any_frame_canonical(tmp_path):
    p = tmp_path / "t.csv"
    write_trace(_frame(), p)  # unsorted, no optional columns
    assert read_trace(p)["timestamp"].tolist() == [0.5, 1.0, 2.0]


# ---- issue 16 items 9-11: outliers, bounds, encodings, defaults, order ----------------------


def _validate(path, capsys) -> tuple[int, str, str]:
    from planner.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["validate", str(path)])
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, " ".join(out.err.split())


HEAD = "timestamp,model,input_tokens,output_tokens\n"


@pytest.mark.parametrize(
    "rows,needle",
    [
        ("0,m,10,1\n5,m,10,1\n1e12,m,10,1\n", "row 3 (line 4), column 'timestamp': 1e+12 is"),
        ("0,m,1e12,1\n", "column 'input_tokens': 1e+12 is above the limit of 100,000,000"),
        ("0,m,10,1e30\n", "column 'output_tokens': 1e+30 is above the limit"),
    ],
    ids=["outlier timestamp", "1e12 tokens", "1e30 tokens"],
)
def test_outliers_are_refused_where_they_are(tmp_path, capsys, rows, needle):
    p = tmp_path / "t.csv"
    p.write_text(HEAD + rows)
    code, _, err = _validate(p, capsys)
    assert code == 2 and f"{p}:" in err and needle in err and "fix:" in err, err


def _jsonl(tmp_path, *rows, raw: bytes = b"") -> str:
    p = tmp_path / "t.jsonl"
    p.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows) + raw)
    return p


def test_jsonl_defaults_booleans_and_encoding(tmp_path, capsys):
    row = {"timestamp": 0, "model": "m", "input_tokens": 10, "output_tokens": 2}
    # a row without cached_tokens takes the schema's default 0
    p = _jsonl(tmp_path, {**row, "cached_tokens": 4}, {**row, "timestamp": 1})
    assert read_trace(p)["cached_tokens"].tolist() == [4, 0]
    # booleans are not counts
    p = _jsonl(tmp_path, row, {**row, "input_tokens": True})
    code, _, err = _validate(p, capsys)
    assert code == 2 and "row 2, column 'input_tokens': True is a boolean" in err, err
    # invalid UTF-8 is located, not a traceback
    p = _jsonl(tmp_path, row, raw=b'{"model": "\xff\xfe"}\n')
    code, _, err = _validate(p, capsys)
    assert code == 2 and "line 2: not UTF-8" in err and "Traceback" not in err, err
    # a list where a value goes
    p = _jsonl(tmp_path, row, {**row, "model": ["m"]})
    code, _, err = _validate(p, capsys)
    assert code == 2 and "row 2, column 'model'" in err, err


def test_out_of_order_and_duplicate_rows_are_counted(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text(HEAD + "5,m,10,1\n1,m,10,1\n5,m,10,1\n7,m,10,1\n")
    df = read_trace(p)
    assert df["timestamp"].tolist() == [1.0, 5.0, 5.0, 7.0]
    assert df.attrs["counts"] == {"out_of_order": 1, "duplicates": 1}
    code, out, _ = _validate(p, capsys)
    assert code == 0 and "4 rows, 1 out of order, 1 duplicates" in " ".join(out.split())


@given(st.lists(st.floats(0, 30 * 86400.0), min_size=1, max_size=50))
@settings(max_examples=100, deadline=None)
def test_hours_spanned_match_counting_them(ts):
    from planner.optimizer.workload.characterize import hour_slots

    slot, spanned = hour_slots(np.array(ts))
    every = np.arange(slot.min(), slot.max() + 1)
    assert spanned.tolist() == np.bincount(every % 24, minlength=24).tolist()
