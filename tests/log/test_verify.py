"""Export verification: structure, chain, fork links, head, torn tails, and detection of any
single-byte change."""

from __future__ import annotations

from typing import Any

import pytest

from threads.errors import WIRE_CODES, LogError
from threads.log.lines import Event, Head, Header, encode_event, make_header
from threads.log.verify import ChainChecker, TornTail, verify_export, verify_lines

THREAD = "0192a000-0000-7000-8000-000000000001"
ROOT = "0192b000-0000-7000-8000-000000000001"
CHILD = "0192b000-0000-7000-8000-000000000002"
USER = {"kind": "user", "principal": {"issuer": "api", "subject": "alice", "tenant": "acme"}}
HOST = {"kind": "host"}
TURN: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("user_input", {"source": "api", "text": "hello"}, USER),
    ("turn_completed", {"reason": "end_turn"}, HOST),
]


def event_id(n: int) -> str:
    return f"0192e000-0000-7000-8000-{n:012x}"


def append(
    header: Header, events: list[Event], type_: str, data: dict[str, Any],
    actor: dict[str, Any] | None = None, **override: Any,
) -> Event:
    """The next event of ``header``'s segment (override any envelope field to break a rule)."""
    last = events[-1] if events else None
    fields: dict[str, Any] = {
        "seq": last.seq + 1 if last else 1,
        "event_id": event_id(100 * (header.branch_id == CHILD) + len(events) + 1),
        "thread_id": header.thread_id,
        "branch_id": header.branch_id,
        "epoch": 1,
        "type": type_,
        "time": 1790000000000,
        "actor": actor or HOST,
        "prev_hash": last.hash if last else header.hash,
        "data": data,
    }
    fields.update(override)
    event = encode_event(**fields)
    events.append(event)
    return event


def root_log(turns: int = 2) -> tuple[Header, list[Event]]:
    header = make_header(THREAD, ROOT, 1790000000000)
    events: list[Event] = []
    for _ in range(turns):
        for type_, data, actor in TURN:
            append(header, events, type_, data, actor)
    return header, events


def export(lines: list[bytes], head: Head | None) -> bytes:
    body = b"".join(line + b"\n" for line in lines)
    return body + (head.line() + b"\n" if head is not None else b"")


def root_export() -> tuple[bytes, Header, list[Event]]:
    header, events = root_log()
    last = events[-1]
    data = export([header.line] + [e.line for e in events], Head(ROOT, last.seq, last.hash))
    return data, header, events


def child_segment(
    parent: Header, parent_events: list[Event], **fork: Any
) -> tuple[Header, list[Event]]:
    child = make_header(fork.pop("thread_id", THREAD), CHILD, 1790000001000)
    at = parent_events[-1]
    data = {"parent_branch_id": parent.branch_id, "at_hash": at.hash, "reason": "repair"}
    data.update(fork)
    events: list[Event] = []
    append(child, events, "fork", data, seq=at.seq + 1, thread_id=THREAD)
    return child, events


def assert_error(data: bytes, code: str, seq: int | None) -> LogError:
    with pytest.raises(LogError) as caught:
        verify_export(data)
    assert (caught.value.code, caught.value.seq) == (code, seq), caught.value.message
    return caught.value


# --- valid exports -----------------------------------------------------------------------------

def test_root_export_verifies() -> None:
    data, header, events = root_export()
    result = verify_export(data)
    assert result.head_verified
    assert result.torn is None
    assert result.head == Head(ROOT, 4, events[-1].hash)
    assert [e.seq for e in result.events] == [1, 2, 3, 4]
    assert result.segments[0].header == header
    assert result.segments[0].fork_at_seq is None
    assert result.committed_bytes == len(data) - len(result.head.line()) - 1


def test_apply_and_on_header_see_every_line_in_order() -> None:
    data, header, events = root_export()
    seen: list[object] = []
    verify_export(data, apply=seen.append, on_header=seen.append)
    assert seen == [header, *events]


def test_child_export_resolves_the_chain() -> None:
    parent, parent_events = root_log()
    child, child_events = child_segment(parent, parent_events)
    for type_, data, actor in TURN:
        append(child, child_events, type_, data, actor)
    lines = [parent.line] + [e.line for e in parent_events] + [child.line]
    lines += [e.line for e in child_events]
    last = child_events[-1]
    result = verify_export(export(lines, Head(CHILD, last.seq, last.hash)))
    assert result.head_verified
    assert [s.fork_at_seq for s in result.segments] == [None, 4]
    assert [e.seq for e in result.events] == [1, 2, 3, 4, 5, 6, 7]


def test_missing_head_is_served_unverified() -> None:
    header, events = root_log()
    data = export([header.line] + [e.line for e in events], None)
    result = verify_export(data)
    assert not result.head_verified
    assert result.head is None
    assert result.torn is None
    assert result.committed_bytes == len(data)


def test_header_only_export_heads_at_seq_zero() -> None:
    header = make_header(THREAD, ROOT, 1)
    result = verify_export(export([header.line], Head(ROOT, 0, header.hash)))
    assert result.head_verified
    assert result.events == []


def test_verify_lines_rechecks_stored_lines() -> None:
    header, events = root_log()
    checker = verify_lines([header.line] + [e.line for e in events])
    assert checker.next_seq == 5
    assert checker.last_hash == events[-1].hash


# --- structure and chain errors ----------------------------------------------------------------

def test_event_before_header() -> None:
    _, _, events = root_export()
    assert_error(export([events[0].line], None), "invalid_transition", 1)


def test_seq_gap() -> None:
    header, events = root_log(turns=1)
    append(header, events, "user_input", TURN[0][1], USER, seq=4)
    assert_error(export([header.line] + [e.line for e in events], None), "seq_mismatch", 4)


def test_prev_hash_mismatch() -> None:
    header, events = root_log(turns=1)
    append(header, events, "user_input", TURN[0][1], USER, prev_hash="0" * 64)
    assert_error(export([header.line] + [e.line for e in events], None), "prev_hash_mismatch", 3)


@pytest.mark.parametrize(
    "override",
    [{"branch_id": CHILD}, {"thread_id": "0192a000-0000-7000-8000-000000000009"},
     {"epoch": 1, "event_id": event_id(1)}],
    ids=["branch", "thread", "event_id"],
)
def test_envelope_rules(override: dict[str, Any]) -> None:
    header, events = root_log(turns=1)
    append(header, events, "user_input", TURN[0][1], USER, **override)
    assert_error(export([header.line] + [e.line for e in events], None), "invalid_transition", 3)


def test_epoch_decrease() -> None:
    header = make_header(THREAD, ROOT, 1)
    events: list[Event] = []
    append(header, events, "user_input", TURN[0][1], USER, epoch=2)
    append(header, events, "turn_completed", TURN[1][1], epoch=1)
    assert_error(export([header.line] + [e.line for e in events], None), "invalid_transition", 2)


def test_fork_mid_segment() -> None:
    header, events = root_log(turns=1)
    fork = {"parent_branch_id": ROOT, "at_hash": events[-1].hash, "reason": "repair"}
    append(header, events, "fork", fork)
    assert_error(export([header.line] + [e.line for e in events], None), "invalid_transition", 3)


def test_child_header_without_fork() -> None:
    parent, parent_events = root_log(turns=1)
    child = make_header(THREAD, CHILD, 2)
    events: list[Event] = []
    append(child, events, "user_input", TURN[0][1], USER, seq=3)
    lines = [parent.line] + [e.line for e in parent_events] + [child.line, events[0].line]
    assert_error(export(lines, None), "invalid_transition", 3)


@pytest.mark.parametrize(
    ("fork", "code", "seq"),
    [
        ({"at_hash": "0" * 64}, "prev_hash_mismatch", 3),
        ({"parent_branch_id": CHILD}, "invalid_transition", 3),
        ({"thread_id": "0192a000-0000-7000-8000-000000000009"}, "invalid_transition", 3),
    ],
    ids=["at_hash", "parent_branch", "cross_thread"],
)
def test_fork_link(fork: dict[str, Any], code: str, seq: int) -> None:
    parent, parent_events = root_log(turns=1)
    child, child_events = child_segment(parent, parent_events, **fork)
    lines = [parent.line] + [e.line for e in parent_events] + [child.line, child_events[0].line]
    assert_error(export(lines, None), code, seq)


def test_event_id_unique_across_fork() -> None:
    parent, parent_events = root_log(turns=1)
    child, child_events = child_segment(parent, parent_events)
    append(child, child_events, "user_input", TURN[0][1], USER, event_id=event_id(1))
    lines = [parent.line] + [e.line for e in parent_events] + [child.line]
    assert_error(export(lines + [e.line for e in child_events], None), "invalid_transition", 4)


# --- head --------------------------------------------------------------------------------------

def test_head_must_match_the_last_line() -> None:
    header, events = root_log()
    lines = [header.line] + [e.line for e in events[:-1]]
    assert_error(export(lines, Head(ROOT, 4, events[-1].hash)), "head_mismatch", 4)


def test_head_of_another_branch() -> None:
    header, events = root_log()
    lines = [header.line] + [e.line for e in events]
    assert_error(export(lines, Head(CHILD, 4, events[-1].hash)), "head_mismatch", 4)


def test_line_after_head() -> None:
    data, _, events = root_export()
    assert_error(data + events[0].line + b"\n", "invalid_transition", 5)


# --- torn tails --------------------------------------------------------------------------------

@pytest.mark.parametrize("with_head", [True, False], ids=["head_last", "event_last"])
def test_torn_tail_at_every_offset_recovers_the_prefix(with_head: bool) -> None:
    header, events = root_log()
    lines = [header.line] + [e.line for e in events]
    if not with_head:
        lines.pop()
    prefix = export(lines, None)
    last = Head(ROOT, 4, events[-1].hash).line() if with_head else events[-1].line
    for cut in range(1, len(last) + 1):
        result = verify_export(prefix + last[:cut])
        assert result.torn == TornTail(len(prefix), last[:cut])
        assert result.committed_bytes == len(prefix)
        assert not result.head_verified
        assert len(result.events) == (4 if with_head else 3)


def test_torn_chunk_is_dropped_whatever_it_holds() -> None:
    data, _, _ = root_export()
    result = verify_export(data + b"\xff not even json")
    assert result.torn == TornTail(len(data), b"\xff not even json")
    assert not result.head_verified


# --- any single-byte change is detected --------------------------------------------------------

def test_every_single_byte_change_is_detected() -> None:
    """Every changed byte fails with a wire code and a seq, except a change to the final
    newline: that leaves the head line unterminated, so it is a torn tail (dropped, and the
    export is served unverified)."""
    data, _, _ = root_export()
    original = verify_export(data)
    for index in range(len(data)):
        for replacement in {data[index] ^ 0x01, ord("\n"), ord("0")} - {data[index]}:
            mutated = data[:index] + bytes([replacement]) + data[index + 1 :]
            if index == len(data) - 1:
                result = verify_export(mutated)
                head_start = len(data) - len(original.head.line()) - 1  # type: ignore[union-attr]
                assert result.torn == TornTail(head_start, mutated[head_start:])
                assert not result.head_verified
                assert result.committed_bytes == original.committed_bytes
                continue
            with pytest.raises(LogError) as caught:
                verify_export(mutated)
            assert caught.value.code in WIRE_CODES
            assert isinstance(caught.value.seq, int)


def test_checker_refuses_a_second_header_before_the_fork() -> None:
    checker = ChainChecker()
    checker.header(make_header(THREAD, ROOT, 1))
    checker.header(make_header(THREAD, CHILD, 2))
    with pytest.raises(LogError) as caught:
        checker.header(make_header(THREAD, CHILD, 3))
    assert caught.value.code == "invalid_transition"


def test_blank_line_is_invalid() -> None:
    data, _, _ = root_export()
    assert_error(b"\n" + data, "invalid_line", 0)
