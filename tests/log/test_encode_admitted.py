"""A writer's own admission (``encode_admitted``) gives every line the verdict full admission
(``admit_line``) gives its bytes, and the store's admission of a line just admitted is a lookup.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threads.errors import LogError
from threads.log import admission
from threads.log.admission import admit_line, encode_admitted
from threads.log.canonical import MAX_DEPTH, MAX_SAFE_INT
from threads.log.ids import uuid7
from threads.log.lines import encode_event

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
NUMBERS = (
    st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([MAX_SAFE_INT, MAX_SAFE_INT + 1, -MAX_SAFE_INT - 1, 2.0**64, 1e21, 3.0])
)
SCALARS = st.none() | st.booleans() | NUMBERS | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3)
    | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=12,
)
IDS = st.sampled_from(["c1", "call_ok", "bad id!", ""])


@pytest.fixture(autouse=True)
def forget() -> Iterator[None]:
    admission._admitted.clear()
    yield
    admission._admitted.clear()


def fields(data: dict[str, Any], type_: str = "tool_call") -> dict[str, Any]:
    return {
        "seq": 3,
        "event_id": uuid7(1),
        "thread_id": uuid7(2),
        "branch_id": uuid7(3),
        "epoch": 1,
        "type": type_,
        "time": 1_790_000_000_000,
        "actor": {"kind": "model"},
        "prev_hash": "a" * 64,
        "data": data,
    }


def verdict(admit: Any) -> str:
    try:
        admit()
    except LogError as exc:
        return exc.code
    finally:
        admission._admitted.clear()
    return "admitted"


def tool_call(call_id: str, value: Any) -> dict[str, Any]:
    return {"call_id": call_id, "input": {"v": value}, "name": "t", "request_event_id": uuid7(4)}


@given(IDS, VALUES)
def test_the_writer_admits_exactly_what_admission_admits(call_id: str, value: Any) -> None:
    kw = fields(tool_call(call_id, value))
    line = encode_event(**kw).line
    full = verdict(lambda: admit_line(line, position_seq=3))
    assert verdict(lambda: encode_admitted(**kw)) == full


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (MAX_SAFE_INT, "admitted"),
        (MAX_SAFE_INT + 2, "invalid_line"),  # read as a double, it is another number
        (2.0**64, "admitted"),  # a double written as its digits reads back as that double
        ((1, 2), "admitted"),  # a tuple is an array, read back as a list
    ],
)
def test_numbers_and_arrays(value: Any, expected: str) -> None:
    assert verdict(lambda: encode_admitted(**fields(tool_call("c1", value)))) == expected


def test_nesting_past_the_limit_is_refused() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH):
        deep = [deep]
    with pytest.raises(LogError) as refused:
        encode_admitted(**fields(tool_call("c1", deep)))
    assert refused.value.code == "invalid_line"
    assert refused.value.seq == 3


def test_a_schema_violation_is_refused_at_its_seq() -> None:
    with pytest.raises(LogError) as refused:
        encode_admitted(**fields(tool_call("bad id!", 1)))
    assert (refused.value.code, refused.value.seq) == ("invalid_line", 3)


def test_the_store_admission_of_a_line_just_admitted_is_a_lookup() -> None:
    event = encode_admitted(**fields(tool_call("c1", 1)))
    assert admit_line(event.line, position_seq=3) is event
    assert event.data["input"] == {"v": 1}
