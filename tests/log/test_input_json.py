"""``parse_input``: what it accepts the log holds as sent, and it refuses the rest by name."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from threads.log.canonical import canonical, parse_strict
from threads.log.input_json import InputRefused, parse_input

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                  max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, database=None)
@given(VALUES, st.booleans())
def test_what_it_accepts_the_log_holds_as_it_was_sent(value: object, pretty: bool) -> None:
    text = json.dumps(value, indent=2 if pretty else None)
    parsed = parse_input(text.encode())
    assert parsed == value
    assert parse_strict(canonical(parsed)) == parsed


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b'{"a":1,"a":1}', "duplicate object key 'a'"),
        (b'{"b":{"a":1,"a":2}}', "duplicate object key 'a'"),
        (b"1e400", "too large for a double"),
        (b"[-1E+999]", "too large for a double"),
        (b"1e-400", "too small for a double"),
        (b"NaN", "NaN is not JSON"),
        (b"[Infinity]", "Infinity is not JSON"),
        (b"9007199254740992", "outside ±(2^53-1)"),
        (b"-" + b"9" * 5000, "outside ±(2^53-1)"),
        (b'"\\ud800"', "lone surrogate (\\ud800)"),
        (b'{"\\udc00x":1}', "lone surrogate (\\udc00)"),
        (b'"\xff"', "not UTF-8"),
        (b"[" * 65 + b"]" * 65, "deeper than 64"),
        (b"[" * 1_000_000, "deeper than 64"),
        (b"{not json", "not JSON the log can hold"),
        (b"", "not JSON the log can hold"),
    ],
)
def test_it_refuses_what_the_log_cant_hold_saying_what(text: bytes, why: str) -> None:
    with pytest.raises(InputRefused) as refused:
        parse_input(text)
    assert why in str(refused.value)


def test_the_edges_the_log_holds_are_accepted() -> None:
    assert parse_input(b"[9007199254740991,-9007199254740991]") == [2**53 - 1, -(2**53) + 1]
    assert parse_input(b"[1.7976931348623157e308,5e-324,0e-999,-0.0]") == [
        1.7976931348623157e308, 5e-324, 0.0, -0.0]
    assert parse_input(b"[" * 64 + b"]" * 64) is not None
    assert parse_input('"\\ud83d\\ude00 é"'.encode()) == "\U0001f600 é"
