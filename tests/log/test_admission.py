"""Line admission: strict parse, canonical bytes, format admission, schema, in that order."""

from __future__ import annotations

from typing import Any

import pytest

from threads.errors import LogError
from threads.log.admission import admit_line
from threads.log.canonical import canonical
from threads.log.lines import Event, Head, Header, encode_event, make_header

THREAD = "0192a000-0000-7000-8000-000000000001"
BRANCH = "0192b000-0000-7000-8000-000000000001"
HASH = "a" * 64


def header_value(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "branch_id": BRANCH, "created_at": 1, "format": "threads.log", "format_version": 1,
        "thread_id": THREAD, "writer": {"impl": "threads-py", "version": "0.1.0"},
    }
    value.update(changes)
    return {k: v for k, v in value.items() if v is not ...}


def head_value(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "branch_id": BRANCH, "format": "threads.head", "format_version": 1, "hash": HASH, "seq": 7,
    }
    value.update(changes)
    return {k: v for k, v in value.items() if v is not ...}


def event(**changes: Any) -> Event:
    fields: dict[str, Any] = {
        "seq": 3, "event_id": "0192e000-0000-7000-8000-000000000003", "thread_id": THREAD,
        "branch_id": BRANCH, "epoch": 1, "type": "turn_completed", "time": 5,
        "actor": {"kind": "host"}, "prev_hash": HASH, "data": {"reason": "end_turn"},
    }
    fields.update(changes)
    return encode_event(**fields)


def refused(raw: bytes, position_seq: int = 3) -> tuple[str, int | None]:
    with pytest.raises(LogError) as caught:
        admit_line(raw, position_seq=position_seq)
    return caught.value.code, caught.value.seq


def test_admits_the_three_kinds_of_line() -> None:
    header = make_header(THREAD, BRANCH, 1)
    assert admit_line(header.line, position_seq=0) == header
    assert isinstance(admit_line(header.line, position_seq=0), Header)
    ev = event()
    assert admit_line(ev.line, position_seq=3) == ev
    assert admit_line(canonical(head_value()), position_seq=8) == Head(BRANCH, 7, HASH)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1.0}', b'{"a":1e3}', b'{"a":-0}', b'{"a":"\\u0041"}', b'{"a":"\\u001F"}',
        b'{"a":"\\/"}', b'{"b":1,"a":2}', b'{"a": 1}', b' {"a":1}', b'{"a":1}\r',
        b'{"a":1,"a":1}', b'{"a":NaN}', b'{"a":9007199254740992}', b'\xff', b'',
        b"[" * 65 + b"]" * 65, b'{"a":"' + b"x" * (1024 * 1024) + b'"}',
    ],
    ids=[
        "fraction", "exponent", "negative_zero", "escaped_letter", "uppercase_escape", "slash",
        "key_order", "whitespace", "leading_space", "carriage_return", "duplicate_key", "nan",
        "unsafe_int", "bad_utf8", "empty", "too_deep", "too_big",
    ],
)
def test_unreadable_lines_are_invalid_at_their_position(raw: bytes) -> None:
    assert refused(raw) == ("invalid_line", 3)


@pytest.mark.parametrize("raw", [b"[]", b"1", b'"x"', b"null", b"true"])
def test_a_line_must_be_an_object(raw: bytes) -> None:
    assert refused(raw) == ("invalid_line", 3)


@pytest.mark.parametrize(
    ("version", "code"),
    [(2, "unsupported_format"), (99, "unsupported_format"), (0, "invalid_line"),
     (-1, "invalid_line"), (1.5, "invalid_line"), ("1", "invalid_line"), (True, "invalid_line"),
     (None, "invalid_line"), (..., "invalid_line")],
)
def test_format_version_admission(version: Any, code: str) -> None:
    assert refused(canonical(header_value(format_version=version))) == (code, 0)
    # a head reports its own seq, whatever the line's position
    assert refused(canonical(head_value(format_version=version)), position_seq=11) == (code, 7)


def test_head_without_an_integer_seq_reports_its_position() -> None:
    assert refused(canonical(head_value(format_version=2, seq="7")), 11) == (
        "unsupported_format", 11,
    )


@pytest.mark.parametrize("fmt", ["threads.other", ["threads.log"], 1, None])
def test_unknown_format_is_invalid_line(fmt: Any) -> None:
    assert refused(canonical(header_value(format=fmt)), position_seq=0) == ("invalid_line", 0)


def test_format_admission_comes_before_the_schema() -> None:
    # an extra field would fail the schema, but the newer version is reported first
    line = canonical(header_value(format_version=2, extra=True))
    assert refused(line, position_seq=0) == ("unsupported_format", 0)


def test_schema_failures_are_invalid_line() -> None:
    assert refused(canonical(header_value(created_at=-1)), 0) == ("invalid_line", 0)
    assert refused(canonical(head_value(hash="XYZ")), 8) == ("invalid_line", 7)
    assert refused(event(data={"reason": "nope"}).line) == ("invalid_line", 3)


def test_canonical_check_comes_before_the_schema() -> None:
    raw = event(data={"reason": "nope"}).line.replace(b'"seq":3', b'"seq":3.0')
    with pytest.raises(LogError, match="canonical"):
        admit_line(raw, position_seq=3)


def test_unknown_critical_event_is_unsupported() -> None:
    assert refused(event(type="approval_quorum", data={}).line) == (
        "unsupported_critical_event", 3,
    )
