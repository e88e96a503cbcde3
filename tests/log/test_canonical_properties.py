"""Property tests of canonical lines: every canonical spelling round-trips through admission,
and every other spelling of the same value is refused."""

from __future__ import annotations

import datetime
import enum
import json
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from threads.errors import LogError
from threads.log import canonical as canonical_module
from threads.log.canonical import (
    MAX_SAFE_INT,
    admit_canonical,
    canonical,
    canonical_reference,
    compact_dumps,
    deeper_than,
    fast_loads,
    may_hold_unsafe_integer,
    parse_written,
)

# Lone surrogates have no UTF-8 form, so no line can hold one.
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
# An integral float at or above 2**53 is written as a long digit string; the reader takes any
# integer literal beyond the safe range as a double again, so it round-trips too.
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.none() | st.booleans() | st.integers(-MAX_SAFE_INT, MAX_SAFE_INT) | FLOATS | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
OBJECTS = st.dictionaries(TEXT, VALUES, min_size=1, max_size=5)


def refused(raw: bytes) -> bool:
    try:
        admit_canonical(raw)
    except LogError as err:
        return err.code == "invalid_line"
    return False


@given(VALUES)
def test_canonical_round_trips(value: Any) -> None:
    assert admit_canonical(canonical(value)) == value


@given(VALUES)
def test_fast_writer_equals_the_reference(value: Any) -> None:
    """``canonical`` takes the C encoder when it is safe; the bytes never differ."""
    assert canonical(value) == canonical_reference(value)


@given(VALUES)
def test_both_fast_encoders_equal_the_reference_on_plain_values(value: Any) -> None:
    """orjson (the ``fast`` extra) and the standard library's encoder: either may write a plain
    value, and neither spells it differently from the reference."""
    if canonical_module._plain(value):
        assert canonical_module._standard_encoder()(value) == canonical_reference(value)
        assert orjson.dumps(value, option=orjson.OPT_SORT_KEYS) == canonical_reference(value)


class Colour(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


@pytest.mark.parametrize(
    "value",
    [
        {"at": datetime.datetime(2026, 1, 1)},
        {"id": uuid.UUID(int=7)},
        {"colour": Colour.RED},
        [Level.HIGH],
        {"n": 2**64},
        {"big": -(2**70)},
        {"nested": {"deep": [1, (2, 3), {"x": True}]}},
    ],
)
def test_values_no_fast_encoder_may_spell_go_to_the_reference(value: Any) -> None:
    """A type orjson would write its own way (datetime, UUID, enum, a 64-bit overflow) is
    written by the reference or refused exactly as the reference refuses it."""
    try:
        expected = canonical_reference(value)
    except TypeError as exc:
        with pytest.raises(TypeError, match=str(exc)):
            canonical(value)
        return
    assert canonical(value) == expected


class Tag(str):
    pass


@pytest.mark.parametrize(
    ("plain", "not_plain"),
    [
        ({"a": [{"b": [1, 2]}]}, {"a": [{"b": [1, 2.5]}]}),
        ({"a": [{"b": ("x", None)}]}, {"a": [{"b": ("x", Colour.RED)}]}),
        ({"a": [{"\uffff": True}]}, {"a": [{"\U0001f600": True}]}),
        ({"a": [["b", {"c": "d"}]]}, {"a": [["b", {"c": Tag("d")}]]}),
        ({"a": [["b", {"c": "d"}]]}, {"a": [["b", {Tag("c"): "d"}]]}),
    ],
)
def test_plain_looks_at_every_level(plain: Any, not_plain: Any) -> None:
    """Only a value whose every node the C encoder spells as RFC 8785 takes it: one float,
    enum, subclass or astral key anywhere (in a list in an object in a list) sends it to the
    reference."""
    assert canonical_module._plain(plain)
    assert not canonical_module._plain(not_plain)


def test_a_value_deeper_than_the_recursion_limit_is_not_plain() -> None:
    """The walk recurses per container: past the interpreter's limit it says "not plain" (and
    the reference refuses the value as it always did) instead of raising on its own."""
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    assert not canonical_module._plain(deep)
    with pytest.raises(RecursionError):
        canonical(deep)


# Keys mixing high-BMP and astral characters: the one place UTF-16 and code point order differ.
ASTRAL_KEYS = st.text(
    st.sampled_from(["a", "\ue000", "\uffff", "\U00010000", "\U0001f600"]), max_size=3
)


@given(st.dictionaries(ASTRAL_KEYS, SCALARS, max_size=6))
def test_astral_keys_sort_by_utf16(value: dict[str, Any]) -> None:
    assert canonical(value) == canonical_reference(value)


@given(VALUES)
def test_canonical_is_stable(value: Any) -> None:
    once = canonical(value)
    assert canonical(admit_canonical(once)) == once


@given(OBJECTS)
def test_surrounding_whitespace_is_refused(value: dict[str, Any]) -> None:
    line = canonical(value)
    for spelled in (b" " + line, line + b" ", line + b"\n", b"\t" + line):
        assert refused(spelled)


@given(OBJECTS)
def test_python_spellings_differ_only_when_refused(value: dict[str, Any]) -> None:
    """Pretty-printed, ASCII-escaped and unsorted spellings are refused unless they happen to
    be byte-identical to the canonical line."""
    line = canonical(value)
    for spelled in (
        json.dumps(value, indent=1).encode(),
        json.dumps(value, ensure_ascii=True).encode(),
        json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(),
        json.dumps(dict(reversed(value.items())), separators=(",", ":")).encode(),
    ):
        assert spelled == line or refused(spelled)


@given(st.dictionaries(TEXT, SCALARS, min_size=2, max_size=5))
def test_key_order_other_than_utf16_is_refused(value: dict[str, Any]) -> None:
    line = canonical(value)
    items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16-be"), reverse=True)
    reordered = b"{" + b",".join(canonical(k) + b":" + canonical(v) for k, v in items) + b"}"
    assert reordered != line
    assert refused(reordered)


@given(st.integers(-MAX_SAFE_INT, MAX_SAFE_INT))
def test_integer_respellings_are_refused(n: int) -> None:
    for spelled in (f"{n}.0", f"{n}e0", f"{float(n):e}", f"{n}E0"):
        assert refused(b'{"n":' + spelled.encode() + b"}")


@given(TEXT.filter(lambda s: any(c.isascii() and c.isalnum() for c in s)))
def test_escaped_plain_characters_are_refused(text: str) -> None:
    index = next(i for i, c in enumerate(text) if c.isascii() and c.isalnum())
    escaped = canonical(text[:index])[:-1] + f"\\u{ord(text[index]):04x}".encode()
    raw = b'{"s":' + escaped + canonical(text[index + 1 :])[1:] + b"}"
    assert admit_canonical(b'{"s":' + canonical(text) + b"}") == {"s": text}
    assert refused(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1.0}',
        b'{"a":1e3}',
        b'{"a":1E3}',
        b'{"a":10e2}',
        b'{"a":-0}',
        b'{"a":-0.0}',
        b'{"a":0.10}',
        b'{"a":1.5e0}',
        b'{"a":"\\u0041"}',
        b'{"a":"\\u001F"}',
        b'{"a":"\\/"}',
        b'{"a":"\\u00e9"}',
        b'{"a":"\\uD83D\\uDE00"}',
        b'{"a":"\\u000a"}',
        b'{"a":"\\u0009"}',
        b'{"a":true }',
        b'{ "a":true}',
        b'{"a" :true}',
        b'{"b":1,"a":1}',
        b'{"\xc3\xa9":1,"z":1}',
        b'{"a":[1 ,2]}',
        b'{"a":1e21}',
        b'{"a":0.0000001}',
    ],
)
def test_known_non_canonical_spellings_are_refused(raw: bytes) -> None:
    assert refused(raw)


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b'{"a":1e+21}', {"a": 1e21}),
        (b'{"a":1e-7}', {"a": 1e-7}),
        (b'{"a":0.000001}', {"a": 1e-6}),
        (b'{"a":"\\u001f"}', {"a": "\x1f"}),
        (b'{"a":"\\n"}', {"a": "\n"}),
        (b'{"a":"\xc3\xa9"}', {"a": "\u00e9"}),
        (b'{"a":0.1}', {"a": 0.1}),
        (b'{"z":1,"\xc3\xa9":1}', {"z": 1, "\u00e9": 1}),
    ],
)
def test_canonical_spellings_are_admitted(raw: bytes, value: dict[str, Any]) -> None:
    assert admit_canonical(raw) == value


def test_compact_json_sorts_keys_and_writes_any_integer() -> None:
    """``compact_dumps`` (our own bytes, such as a fold snapshot): sorted keys, UTF-8, no
    whitespace, and an integer past 64 bits written too (orjson refuses it)."""
    value = {"b": [1, 2**70], "a": "\u00e9"}
    assert compact_dumps(value) == '{"a":"\u00e9","b":[1,1180591620717411303424]}'.encode()
    assert fast_loads(compact_dumps({"b": 1.5, "a": None})) == {"a": None, "b": 1.5}


@given(st.integers(0, 70), st.booleans(), st.integers(-(2**60), 2**60))
def test_a_written_line_is_judged_as_deeper_than_and_the_integer_scan_judge_it(
    depth: int, objects: bool, number: int
) -> None:
    """``parse_written`` scans a line once for both checks: its refusals are theirs."""
    value: Any = number
    for _ in range(depth):
        value = {"k": value} if objects else [value]
    raw = canonical(value)
    try:
        admitted = admit_canonical(raw)  # the full admission a stranger's line gets
    except LogError:
        assert deeper_than(raw) or may_hold_unsafe_integer(raw)
        with pytest.raises(LogError) as refused:
            parse_written(raw)
        assert refused.value.code == "invalid_line"
    else:
        assert parse_written(raw) == admitted
