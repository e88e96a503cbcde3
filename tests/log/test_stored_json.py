"""The parse that store reads use gives every admitted line the value admission read from it
(``parse_strict``), with orjson installed or not."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threads.log import canonical as canonical_module
from threads.log import stored_json
from threads.log.canonical import (
    MAX_SAFE_INT,
    admit_canonical,
    canonical,
    canonical_reference,
    lines_holding_digit_runs,
    may_hold_unsafe_integer,
    parse_strict,
)

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INT, MAX_SAFE_INT)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=12,
)


@given(st.dictionaries(TEXT, VALUES, max_size=4))
def test_the_value_admission_read(value: dict[str, Any]) -> None:
    line = canonical(value)
    assert stored_json.loads_stored(line) == parse_strict(line)
    assert stored_json.StoredReader(json.loads).line(line) == parse_strict(line)


def test_a_double_written_as_digits_past_64_bits() -> None:
    line = canonical({"n": 2.0**64})  # admitted: the literal is that double's canonical form
    admit_canonical(line)
    assert line == b'{"n":18446744073709552000}'
    assert stored_json.loads_stored(line) == {"n": 2.0**64}
    assert stored_json.StoredReader(json.loads).line(line) == {"n": 2.0**64}


def test_without_orjson_the_standard_library_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "orjson", None)  # import orjson now raises ImportError
    parse = stored_json.StoredReader(canonical_module._fast_decoder()).line
    assert parse(b'{"a":[1,2.5,"x"]}') == {"a": [1, 2.5, "x"]}
    assert parse(b'{"n":18446744073709552000}') == {"n": 2.0**64}
    encode = canonical_module._fast_encoder()
    assert encode({"b": [1, "\u00e9\n"], "a": None}) == canonical_reference(
        {"b": [1, "\u00e9\n"], "a": None}
    )


def test_a_damaged_line_still_fails_to_decode() -> None:
    with pytest.raises(ValueError):
        stored_json.loads_stored(b'{"a":1')


DIGITS_OR_NOT = st.lists(
    st.sampled_from([b"7", b"7" * 9, b"x", b"\n", b'"', b",", b"}", b"]", b" "]), max_size=40
)


@given(st.lists(DIGITS_OR_NOT.map(b"".join), max_size=8))
def test_one_scan_finds_the_lines_each_scan_finds(lines: list[bytes]) -> None:
    assert lines_holding_digit_runs(lines) == {
        index for index, line in enumerate(lines) if may_hold_unsafe_integer(line)
    }


def test_a_digit_run_never_spans_two_lines() -> None:
    assert lines_holding_digit_runs([b"12345678", b"12345678"]) == set()
    assert lines_holding_digit_runs([b"1", b"x" + b"1" * 16, b"2"]) == {1}


@pytest.mark.parametrize(
    "line",
    [
        b'{"n":12345678901234567}',
        b'{"n":[1,-9007199254740993]}',
        b'{"n":18446744073709552000,"m":1}',
        b'{"n": 12345678901234567 }',
        b"12345678901234567",
    ],
)
def test_every_long_integer_literal_is_found(line: bytes) -> None:
    assert may_hold_unsafe_integer(line)
    assert lines_holding_digit_runs([b"{}", line, b"{}"]) == {1}


@pytest.mark.parametrize(
    "line",
    [
        b'{"prev_hash":"12345678901234567890abcdef"}',  # a run of digits inside a string
        b'{"x":1234567890123456.5,"y":12345678901234567e3}',  # doubles to every parser
        b'{"n":900719925474099}',  # 15 digits: within the safe range
    ],
)
def test_digits_that_end_no_integer_literal_are_not_found(line: bytes) -> None:
    assert not may_hold_unsafe_integer(line)
    assert lines_holding_digit_runs([line]) == set()


def test_a_long_batch_is_scanned_in_parts_and_each_line_found() -> None:
    lines = [b'{"n":1}'] * 1000
    holding = {0, 255, 256, 511, 512, 999}
    for index in holding:
        lines[index] = b'{"n":12345678901234567}'
    assert lines_holding_digit_runs(lines) == holding


@pytest.mark.parametrize("parser", ["json", "orjson"])
def test_a_batch_reads_each_line_as_one_line_is_read(parser: str) -> None:
    reader = stored_json.StoredReader(pytest.importorskip(parser).loads)
    lines = [
        canonical({"n": 2.0**64}),
        b'{"a":[1,2.5,"x"]}',
        canonical({"id": "1234567890123456", "n": 3}),
    ]
    assert reader.lines(lines) == [reader.line(line) for line in lines]
    assert reader.lines(lines)[0] == {"n": 2.0**64}
    assert isinstance(reader.lines(lines)[0]["n"], float)


@pytest.mark.parametrize("bad", [b'{"a":1', b'{"n":12345678901234567', b'{"a":"\xff"}'])
def test_a_batch_names_the_first_line_that_does_not_parse(bad: bytes) -> None:
    with pytest.raises(stored_json.UndecodedLineError) as raised:
        stored_json.loads_stored_lines([b"{}", b"[1]", bad, b'{"a":1'])
    assert raised.value.index == 2
