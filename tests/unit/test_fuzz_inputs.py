"""Fuzzing every file kind through the CLI: each outcome is exit 0, or exit 2 naming the file.

Mutants of valid files (keys dropped, renamed, duplicated; values swapped for odd ones:
huge, negative, non-finite, booleans, lists, mappings, path-like names, deep nesting;
text truncated or spliced with bytes), generated traces in CSV, JSONL and Parquet, and
damaged state folders. Each runs through the command a user would run (`planner validate`,
`planner status`, `planner state check`) in-process. An outcome is
- accepted: exit 0;
- refused, located: exit 2, one `error:` line that names the file (and for YAML a field
  path, a line or the top level), with no traceback;
- anything else: a traceback, another exit code, an unlocated message. There must be none.

Hypothesis runs derandomized (tests/conftest.py): the same cases on every run.
`PLANNER_FUZZ_REPORT=1` prints the counts per kind. Inputs that broke the CLI once are kept
in tests/data/fuzz_corpus/ and run by `test_corpus`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
LAB16 = ROOT / "plans" / "examples" / "lab16"
SMALL = ROOT / "tests" / "data" / "small"
CORPUS = ROOT / "tests" / "data" / "fuzz_corpus"
CASES = int(os.environ.get("PLANNER_FUZZ_CASES", "300"))  # generated cases per file kind

COUNTS: dict[str, Counter] = {}
FUZZ = settings(
    max_examples=CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(autouse=True)
def _one_click_command(monkeypatch):
    """Typer builds the click command tree on every call (~0.1 s): build it once here."""
    import functools

    import typer.main

    monkeypatch.setattr(typer.main, "get_command", functools.cache(typer.main.get_command))


def _run(argv: list[str]) -> tuple[int, str]:
    """Exit code and stderr of one in-process CLI run; a traceback is code -1."""
    import io
    import traceback

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main([str(a) for a in argv])
            code = 0
        except SystemExit as e:
            code = int(e.code or 0) if not isinstance(e.code, str) else 1
        except Exception:  # what the fuzzing is for: report it, do not hide it
            return -1, traceback.format_exc()
    return code, err.getvalue()


# Where a YAML problem is: a field path (`file: path: message`), a line, or the whole file.
_WHERE = re.compile(
    r"""^ ?(\(top level\)|([^\s:'"]|'[^']*'|"[^"]*")+): \S"""
    r"|\bline \d+|^ ?the file (is empty|holds no YAML|is [\d.]+ MiB)"
    r"|nested more than|aliases are expanded|^ ?not UTF-8"
)


def _outcome(kind: str, code: int, err: str, file: Path, *, field: bool) -> str:
    """Classify one run (and count it); the message says what was wrong with it."""
    flat = " ".join(err.split())
    if code == 0:
        res = "accepted"
    elif (
        code == 2
        and flat.startswith("error: ")
        and str(file) in flat
        and "Traceback" not in err
        and (not field or _WHERE.search(flat.split(f"{file}:", 1)[-1].split(" fix: ")[0]))
    ):
        res = "refused, located"
    else:
        res = "other"
    COUNTS.setdefault(kind, Counter())[res] += 1
    return res


def _check(kind: str, argv: list, file: Path, *, field: bool = True) -> None:
    code, err = _run(argv)
    res = _outcome(kind, code, err, file, field=field)
    assert res != "other", f"{kind}: exit {code}\n{err}"


# ---- YAML mutants --------------------------------------------------------------------------

ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            " ",
            "../../evil",
            "-rf",
            "A100-90GB",
            "1e309",
            "0",
            "-1",
            "nan",
            "2026-01-05",
            "bf16",
            "gpu",
            "cpu",
            "L40S",
            "node-a",
            "coder-32b",
            "\u00e9\u4e2d",
            "a" * 300,
        ]
    ),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "name", "kind", "type"]), st.integers(), max_size=2),
    st.recursive(st.integers(), lambda c: st.lists(c, max_size=2), max_leaves=30),
)


def _slots(doc, out=None, path=()):
    """Every (container, key) in a document, depth first."""
    out = [] if out is None else out
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    )
    for k, v in items:
        out.append((doc, k))
        _slots(v, out, (*path, k))
    return out


@st.composite
def yaml_mutant(draw, seed: dict) -> str:
    doc = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(doc)
        if not slots:
            break
        box, key = draw(st.sampled_from(slots))
        op = draw(st.sampled_from(["set", "set", "set", "drop", "rename", "dup"]))
        if op == "set":
            box[key] = draw(ODD)
        elif op == "drop":
            del box[key]
        elif op == "rename" and isinstance(box, dict):
            new = draw(
                st.one_of(
                    st.just(str(key)[:-1] or "k"),
                    st.just(str(key) + "x"),
                    st.just(str(key)[1:2] + str(key)[:1] + str(key)[2:]),
                    st.text(max_size=6),
                )
            )
            box[new] = box.pop(key)
        elif isinstance(box, list):
            box.append(copy.deepcopy(box[key]))
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    cut = draw(st.sampled_from(["none", "none", "none", "truncate", "splice"]))
    if cut == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif cut == "splice":
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at]
            + draw(st.sampled_from(["\t", ": ", "- ", "[", "{", "&a *a", "\x00"]))
            + text[at:]
        )
    return text


def _seed(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _plan_seed() -> dict:
    doc = _seed(ROOT / "tests" / "golden" / "plan_small.yaml")
    for k in ("cluster", "models", "slo", "workload"):
        doc["inputs"][k]["path"] = str(SMALL / f"{k}.yaml")
    return doc


PROFILE = {
    "kind": "profile",
    "node": "node-a",
    "gpu_type": "L40S",
    "hardware": {
        "gemm_tflops": {"bf16": {"median": 300.0, "spread": 5.0, "n": 5}},
        "h2d_pinned_gbps": {"median": 24.0},
    },
    "engine": [
        {
            "model": "planner-7b",
            "variant": "awq",
            "tp": 1,
            "cold_start_s": 40.0,
            "prefill": [{"prompt_tokens": 512, "latency_s": {"median": 0.05}}],
            "decode": [{"concurrency": 4, "tpot_s": {"median": 0.02}}],
        }
    ],
    "calibration": {"compute_efficiency": 0.6, "h2d_gbps": 20.0, "points": 3},
}

YAML_KINDS = {
    "cluster": (lambda: _seed(LAB16 / "cluster.yaml"), []),
    "models": (lambda: _seed(LAB16 / "models.yaml"), []),
    "slo": (lambda: _seed(LAB16 / "slo.yaml"), ["--models", LAB16 / "models.yaml"]),
    "plan": (_plan_seed, []),
    "profile": (lambda: PROFILE, []),
    "workload spec": (lambda: _seed(LAB16 / "workload.yaml"), ["--models", LAB16 / "models.yaml"]),
}


@pytest.mark.parametrize("kind", list(YAML_KINDS))
def test_yaml_mutants(kind):
    seed, extra = YAML_KINDS[kind]
    suffix = "workload.yaml" if kind == "workload spec" else f"{kind}.yaml"

    @FUZZ
    @given(yaml_mutant(seed()))
    def one(text):
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / suffix
            f.write_text(text, encoding="utf-8")
            argv = ["validate", f, *extra]
            if kind == "workload spec":
                argv += ["--kind", "workload"]
            _check(kind, argv, f)

    one()


# ---- traces --------------------------------------------------------------------------------

CELL = {
    "timestamp": st.one_of(
        st.floats(-10, 1e13),
        st.just(float("nan")),
        st.integers(-5, 10**6),
        st.sampled_from(["2026-01-05T09:00:00Z", "yesterday", "", "1e999"]),
        st.booleans(),
    ),
    "model": st.one_of(st.sampled_from(["planner-7b", "coder-32b", "", " ", "zz"]), st.integers()),
    "input_tokens": st.one_of(
        st.integers(-3, 10**9),
        st.floats(allow_nan=True, allow_infinity=True),
        st.just(1e30),
        st.sampled_from(["12", "x", ""]),
        st.booleans(),
    ),
    "output_tokens": st.one_of(st.integers(-3, 5000), st.floats(0, 10), st.booleans()),
    "cached_tokens": st.one_of(st.integers(-3, 5000), st.none()),
    "user": st.one_of(st.text(max_size=4), st.integers(), st.none()),
    "session": st.one_of(st.text(max_size=4), st.floats(0, 3)),
}
REQUIRED = ("timestamp", "model", "input_tokens", "output_tokens")


@st.composite
def trace_rows(draw) -> list[dict]:
    cols = [c for c in CELL if c in REQUIRED or draw(st.booleans())]
    if draw(st.integers(0, 9)) == 0:
        cols.remove(draw(st.sampled_from(REQUIRED)))
    good = st.fixed_dictionaries(
        {
            "timestamp": st.floats(0, 86400 * 3),
            "model": st.sampled_from(["planner-7b", "coder-32b"]),
            "input_tokens": st.integers(1, 40000),
            "output_tokens": st.integers(1, 2000),
        }
    )
    odd = draw(st.sampled_from([0, 0, 1, 4]))  # in 16: how often a cell is odd or missing
    rows = []
    for _ in range(draw(st.integers(0, 8))):
        row = draw(good)
        for c in cols:
            if c not in row or draw(st.integers(0, 15)) < odd:
                row[c] = draw(CELL[c]) if c in REQUIRED or odd else draw(st.integers(0, 3))
        rows.append({c: row[c] for c in cols if c in row and draw(st.integers(0, 15)) >= odd})
    return rows


def _write_trace(rows: list[dict], path: Path, draw_bytes: bytes) -> None:
    if path.suffix == ".jsonl":
        text = "".join(json.dumps(r) + "\n" for r in rows).encode()
        path.write_bytes(text + draw_bytes)
    elif path.suffix == ".csv":
        path.write_bytes(pd.DataFrame(rows).to_csv(index=False).encode() + draw_bytes)
    else:
        df = pd.DataFrame(rows)
        for c in df.columns:  # Parquet columns hold one type: mixed cells become strings
            if df[c].map(type).nunique() > 1:
                df[c] = df[c].map(lambda v: None if v is None else str(v))
        try:
            df.to_parquet(path)
        except Exception:  # a frame pyarrow cannot store (e.g. no columns): raw bytes instead
            path.write_bytes(b"PAR1" + draw_bytes)
        if draw_bytes:
            with open(path, "r+b") as f:
                f.seek(len(draw_bytes) % max(path.stat().st_size, 1))
                f.write(draw_bytes)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_trace_files(suffix):
    @FUZZ
    @given(
        trace_rows(),
        st.one_of(st.just(b""), st.just(b""), st.binary(max_size=16), st.just(b"\xff\xfe\n")),
        st.booleans(),
    )
    def one(rows, tail, with_models):
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / f"trace{suffix}"
            _write_trace(rows, f, tail)
            extra = ["--models", LAB16 / "models.yaml"] if with_models else []
            _check(f"trace {suffix[1:]}", ["validate", f, *extra], f, field=False)

    one()


# ---- state folders -------------------------------------------------------------------------


_TEMPLATES: dict[int, bytes] = {}


def _make_state(d: Path, rows: int) -> Path:
    """A state dir with `rows` instances (built once per size, then copied: commits fsync)."""
    if rows not in _TEMPLATES:
        with tempfile.TemporaryDirectory() as t:
            _TEMPLATES[rows] = _build_state(Path(t), rows).read_bytes()
    d.mkdir(parents=True)
    (d / "state.sqlite").write_bytes(_TEMPLATES[rows])
    return d / "state.sqlite"


def _build_state(d: Path, rows: int) -> Path:
    from planner.adjuster.state import InstanceRow, StateStore

    with StateStore(d) as s:
        for k in range(rows):
            s.upsert(
                InstanceRow(
                    id=f"i-{k}",
                    model="m",
                    variant="v",
                    node="n",
                    port=18700 + k,
                    status="stopped",
                    gpus="[0]",
                )
            )
            s.journal("start", f"i-{k}", "n", "ok", "x" * 40)
        s.set_meta(point="p", plan_path="/nowhere/plan.yaml")
    con = sqlite3.connect(d / "state.sqlite")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return d / "state.sqlite"


COLUMNS = ["id", "model", "port", "pid", "status", "gpus", "started_at", "memory_gib", "restarts"]


@st.composite
def damage(draw):
    op = draw(st.sampled_from(["none", "truncate", "bytes", "drop", "column", "version", "junk"]))
    if op == "truncate":
        return op, draw(st.integers(0, 40000))
    if op == "bytes":
        return op, (draw(st.integers(0, 40000)), draw(st.binary(min_size=1, max_size=600)))
    if op == "drop":
        return op, draw(st.sampled_from(["instances", "journal", "lease", "meta"]))
    if op == "column":
        return op, (
            draw(st.sampled_from(COLUMNS)),
            draw(
                st.one_of(
                    st.none(),
                    st.integers(-(2**63), 2**63 - 1),
                    st.floats(allow_nan=False),
                    st.text(max_size=8),
                    st.binary(max_size=4),
                )
            ),
        )
    if op == "version":
        return op, draw(st.integers(-5, 5))
    if op == "junk":
        return op, draw(st.binary(max_size=64))
    return op, None


def _damage(db: Path, op: str, arg) -> None:
    if op == "truncate":
        db.write_bytes(db.read_bytes()[:arg])
    elif op == "bytes":
        with open(db, "r+b") as f:
            f.seek(arg[0] % db.stat().st_size)
            f.write(arg[1])
    elif op in ("drop", "column", "version"):
        con = sqlite3.connect(db)
        if op == "drop":
            con.execute(f"DROP TABLE {arg}")
        elif op == "column":
            con.execute(f"UPDATE instances SET {arg[0]} = ? WHERE id = 'i-1'", (arg[1],))
        else:
            con.execute(f"PRAGMA user_version = {arg}")
        con.commit()
        con.close()
    elif op == "junk":
        db.write_bytes(arg)


def test_state_folders():
    @FUZZ
    @given(st.sampled_from([0, 1, 3, 40]), damage())
    def one(rows, dmg):
        with tempfile.TemporaryDirectory() as d:
            db = _make_state(Path(d) / "state", rows)
            with contextlib.suppress(sqlite3.DatabaseError):  # the damage itself may fail
                _damage(db, *dmg)
            for argv in (
                ["status", "--state-dir", db.parent],
                ["state", "check", "--state-dir", db.parent],
            ):
                _check("state folder", argv, db, field=False)

    one()


# ---- the corpus of inputs that broke the CLI before ----------------------------------------


def _corpus() -> list[Path]:
    return sorted(p for p in CORPUS.iterdir() if p.name != "README.md") if CORPUS.is_dir() else []


@pytest.mark.parametrize("case", _corpus(), ids=lambda p: p.name)
def test_corpus(case, tmp_path):
    """Each file once crashed or fooled a command (README.md there says how); now it is handled."""
    kind, name = case.name.split("--", 1)
    if kind == "state":
        db = tmp_path / "state" / "state.sqlite"
        db.parent.mkdir()
        db.write_bytes(case.read_bytes())
        for argv in (
            ["status", "--state-dir", db.parent],
            ["state", "check", "--state-dir", db.parent],
        ):
            _check("corpus", argv, db, field=False)
        return
    f = tmp_path / name
    f.write_bytes(case.read_bytes())
    _check("corpus", ["validate", f, "--models", LAB16 / "models.yaml"], f, field=kind == "yaml")


def test_zz_report():
    """The counts per kind (printed with PLANNER_FUZZ_REPORT=1), and nothing in 'other'."""
    if os.environ.get("PLANNER_FUZZ_REPORT"):
        for kind, c in COUNTS.items():
            print(
                f"fuzz {kind:14} accepted {c['accepted']:4}  refused, located "
                f"{c['refused, located']:4}  other {c['other']}"
            )
    assert all(c["other"] == 0 for c in COUNTS.values())
