"""The request log's stand-in columns (issue 17 item 4): a log written before `served_by` and
`substituted` existed still reads as a trace, gains the columns when the gateway opens it,
and then holds old and new rows side by side (real SQLite files)."""

from __future__ import annotations

import sqlite3

from planner.adjuster.gateway import LOG_COLUMNS, RequestLog
from planner.trace.frame import read_trace

OLD_SCHEMA = (
    "CREATE TABLE requests (timestamp REAL NOT NULL, user TEXT NOT NULL,"
    " session TEXT NOT NULL, model TEXT NOT NULL, input_tokens INTEGER NOT NULL,"
    " output_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL DEFAULT 0,"
    " ttft_s REAL, latency_s REAL NOT NULL, switch_wait_s REAL NOT NULL DEFAULT 0,"
    " status INTEGER NOT NULL, instance TEXT NOT NULL)"
)


def test_an_old_log_reads_and_gains_the_stand_in_columns(tmp_path):
    path = tmp_path / "requests.sqlite"
    con = sqlite3.connect(path)
    con.execute(OLD_SCHEMA)
    con.execute(
        "INSERT INTO requests VALUES (1700000000.0, 'ann', 's1', 'coder', 100, 10, 0, 0.2, 1.0,"
        " 0.0, 200, 'coder-0')"
    )
    con.commit()
    con.close()
    old = read_trace(path)
    assert (old["served_by"].tolist(), old["substituted"].tolist()) == ([""], [0])

    log = RequestLog(path)  # the gateway opens it: the columns are added
    row = dict(
        timestamp=1700000001.0,
        user="bob",
        session="s2",
        model="coder",
        input_tokens=50,
        output_tokens=5,
        cached_tokens=0,
        ttft_s=0.1,
        latency_s=0.5,
        switch_wait_s=0.0,
        status=200,
        instance="planner-0",
        served_by="planner",
        substituted=1,
    )
    log.add(tuple(row[c] for c in LOG_COLUMNS))
    log.close()
    both = read_trace(path)
    assert both["model"].tolist() == ["coder", "coder"]
    assert both["served_by"].tolist() == ["", "planner"]
    assert both["substituted"].tolist() == [0, 1]
