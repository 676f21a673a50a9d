"""A request body's JSON is read as json.loads reads it: body.py reads an object's UTF-8 text
without json.loads' encoding detection (the gateway's hot path), and must give the same
value, or refuse what json.loads refuses."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.adjuster.gateway.body import _loads

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _verdict(read, body: bytes):
    try:
        return ("value", read(body))
    except RecursionError:
        return ("refused", "too deep")
    except ValueError:  # (UnicodeDecodeError and JSONDecodeError among them)
        return ("refused", "not JSON")


@settings(max_examples=300, deadline=None)
@given(
    obj=st.dictionaries(st.text(), _JSON, max_size=4),
    cut=st.integers(0, 64),
    extra=st.binary(max_size=4),
    encoding=st.sampled_from(["utf-8", "utf-16", "utf-16-le", "utf-32"]),
)
def test_a_body_reads_as_json_loads_reads_it(obj, cut, extra, encoding):
    whole = json.dumps(obj, ensure_ascii=False).encode(encoding, "surrogatepass")
    for body in (whole, whole[: len(whole) - cut] + extra, b" " + whole, whole + b" \n"):
        assert _verdict(_loads, body) == _verdict(json.loads, body)


def test_nesting_past_the_parsers_bound_is_refused_alike():
    body = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert _verdict(_loads, body) == _verdict(json.loads, body) == ("refused", "too deep")
