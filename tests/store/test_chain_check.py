"""The chain check a read runs names the damaged line whichever line changed and however:
its value (the next line no longer links to it), its own ``prev_hash``, the header, or the
last line (which the stored head names)."""

from __future__ import annotations

import pytest

from threads.clock import FakeClock
from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.store.protocol import BranchInfo
from threads.store.rows import build_segment, check_chain
from threads.testing.sample_log import SampleLog


def sample() -> tuple[BranchInfo, SampleLog]:
    log = SampleLog(FakeClock())
    log.started()
    log.turn()
    log.turn()
    info = BranchInfo(
        log.header.branch_id, log.header.thread_id, "local", None, None, "ready",
        log.last_seq, log.last_hash, True, None,
    )
    return info, log


def damaged_at(info: BranchInfo, header: bytes, lines: list[bytes]) -> int | None:
    with pytest.raises(StoreError) as raised:
        check_chain(info, [build_segment(info, header, lines)])
    assert raised.value.code == "log_corrupt"
    return raised.value.seq


def test_an_intact_chain_passes() -> None:
    info, log = sample()
    check_chain(info, [build_segment(info, log.header.line, [e.line for e in log.events])])


@pytest.mark.parametrize("seq", range(1, 10))
def test_a_changed_value_names_its_line(seq: int) -> None:
    info, log = sample()
    lines = [e.line for e in log.events]
    lines[seq - 1] = lines[seq - 1].replace(b'"epoch":1', b'"epoch":2')
    assert damaged_at(info, log.header.line, lines) == seq


@pytest.mark.parametrize("seq", range(1, 10))
def test_a_changed_prev_hash_names_its_line(seq: int) -> None:
    info, log = sample()
    lines = [e.line for e in log.events]
    event = log.events[seq - 1]
    lines[seq - 1] = event.line.replace(event.prev_hash.encode(), sha256_hex(b"elsewhere").encode())
    assert damaged_at(info, log.header.line, lines) == seq


def test_a_changed_header_is_seq_0() -> None:
    info, log = sample()
    header = log.header.line.replace(b'"threads-py"', b'"threads-px"')
    assert damaged_at(info, header, [e.line for e in log.events]) == 0


def test_a_missing_line_is_not_contiguous() -> None:
    info, log = sample()
    lines = [e.line for e in log.events]
    del lines[4]
    assert damaged_at(info, log.header.line, lines) == 5


def test_a_read_builds_the_events_as_written() -> None:
    log = SampleLog(FakeClock())
    log.started()
    while len(log.events) < 700:  # past one part of the digit scan (``_SCAN_LINES``)
        log.turn()
    info = BranchInfo(
        log.header.branch_id, log.header.thread_id, "local", None, None, "ready",
        log.last_seq, log.last_hash, True, None,
    )
    segment = build_segment(info, log.header.line, [e.line for e in log.events])
    assert segment.events == log.events
    assert all(type(event) is type(log.events[0]) for event in segment.events)


def test_each_read_decodes_its_own_values() -> None:
    info, log = sample()
    lines = [e.line for e in log.events]
    first = build_segment(info, log.header.line, lines)
    first.events[1].data["text"] = "changed by a reader"
    assert build_segment(info, log.header.line, lines).events == log.events
