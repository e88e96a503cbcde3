"""Export/import through the ``Store`` protocol: byte-identical round trips, re-import rules,
torn tails at every offset, and child branches carried with their ancestor segment."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from threads.clock import FakeClock
from threads.errors import LogError, StoreError
from threads.store.protocol import Store
from threads.store.transfer import TORN_MEDIA_TYPE, export_branch, import_log
from threads.testing.sample_log import SampleLog

TENANT = "acme"

StoreFactory = Callable[[], Store]  # the ``open_store`` fixture: a fresh, empty store


def root_log(clock: FakeClock, turns: int = 2) -> SampleLog:
    log = SampleLog(clock)
    log.started()
    for i in range(turns):
        log.turn(text=f"question {i}", reply=f"answer {i}")
    return log


def child_log(clock: FakeClock) -> SampleLog:
    root = root_log(clock)
    root.snapshot()
    child = root.fork()
    child.turn(text="now in the child")
    return child


async def test_export_of_store_written_branch_matches_the_writer(
    store: Store, clock: FakeClock
) -> None:
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id=TENANT)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", 30_000)
    log.epoch = lease.epoch
    events = [log.started(), *log.turn()]
    await store.append(log.header.branch_id, events, expected_seq=0, lease=lease)
    assert await export_branch(store, log.header.branch_id) == log.export()


async def test_export_import_round_trip_is_byte_identical(
    open_store: StoreFactory, clock: FakeClock
) -> None:
    data = root_log(clock).export()
    source, target = open_store(), open_store()
    first = await import_log(source, data, tenant_id=TENANT)
    exported = await export_branch(source, first.branch_id)
    assert exported == data

    result = await import_log(target, exported, tenant_id=TENANT)
    assert result.stored
    assert result.head_verified
    assert (result.head_seq, result.events, result.status) == (9, 9, "idle")
    assert await export_branch(target, result.branch_id) == data
    branch = await target.get_branch(result.branch_id)
    assert (branch.tenant_id, branch.head_verified, branch.dropped_ref) == (TENANT, True, None)


async def test_identical_reimport_is_a_no_op(store: Store, clock: FakeClock) -> None:
    data = root_log(clock).export()
    assert (await import_log(store, data, tenant_id=TENANT)).stored
    again = await import_log(store, data, tenant_id=TENANT)
    assert not again.stored
    assert await export_branch(store, again.branch_id) == data


async def test_different_log_with_the_same_branch_is_seq_conflict(
    store: Store, clock: FakeClock
) -> None:
    log = root_log(clock)
    await import_log(store, log.export(), tenant_id=TENANT)
    rival = SampleLog(clock)
    rival.header = log.header  # same thread and branch ids, other history
    rival.started()
    rival.turn(text="something else")
    with pytest.raises(StoreError) as caught:
        await import_log(store, rival.export(), tenant_id=TENANT)
    assert caught.value.code == "seq_conflict"
    assert await export_branch(store, log.header.branch_id) == log.export()


async def test_longer_export_of_a_stored_branch_is_seq_conflict(
    store: Store, clock: FakeClock
) -> None:
    log = root_log(clock, turns=1)
    await import_log(store, log.export(), tenant_id=TENANT)
    log.turn()
    with pytest.raises(StoreError) as caught:
        await import_log(store, log.export(), tenant_id=TENANT)
    assert caught.value.code == "seq_conflict"


def _torn_cuts(data: bytes, line_index: int) -> list[int]:
    """Every cut inside line ``line_index`` (from the end: -1 is the Head line), from its first
    byte through its last byte, the newline excluded."""
    starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    start, end = starts[line_index - 1], starts[line_index] - 1
    return list(range(start + 1, end + 1))


@pytest.mark.parametrize(("line", "kept_events"), [(-1, 9), (-2, 8)], ids=["head", "last_event"])
async def test_torn_tail_at_every_offset_keeps_the_prefix(
    store: Store, clock: FakeClock, line: int, kept_events: int
) -> None:
    """Each cut tears a log of its own (fresh thread and branch ids, the same line lengths), so
    every import meets a store that has never seen its branch, and one store serves all cuts."""
    count = len(_torn_cuts(root_log(clock).export(), line))
    for index in range(count):
        log = root_log(clock)
        data = log.export()
        cuts = _torn_cuts(data, line)
        assert len(cuts) == count, "the sample logs' lines changed length"
        cut = cuts[index]
        prefix_lines = log.lines()[: kept_events + 1]
        prefix = b"".join(raw + b"\n" for raw in prefix_lines)
        result = await import_log(store, data[:cut], tenant_id=TENANT)
        assert result.branch_id == log.header.branch_id
        assert (result.stored, result.head_seq, result.head_verified, result.torn_at_offset) == (
            True, kept_events, False, len(prefix),
        ), cut
        branch = await store.get_branch(result.branch_id)
        assert not branch.head_verified
        assert branch.dropped_ref == result.dropped_ref
        assert branch.dropped_ref is not None
        assert branch.dropped_ref["media_type"] == TORN_MEDIA_TYPE
        assert await store.get_artifact(branch.dropped_ref["sha256"]) == data[len(prefix) : cut]
        exported = await export_branch(store, result.branch_id)
        assert exported.startswith(prefix)
        assert exported.count(b"\n") == len(prefix_lines) + 1


async def test_export_cut_at_a_line_boundary_is_unverified_without_artifact(
    store: Store, clock: FakeClock
) -> None:
    log = root_log(clock)
    data = log.export()
    cut = len(data) - len(log.head().line()) - 1
    result = await import_log(store, data[:cut], tenant_id=TENANT)
    assert (result.head_verified, result.dropped_ref, result.torn_at_offset) == (False, None, None)
    assert not (await store.get_branch(result.branch_id)).head_verified


async def test_child_branch_exports_its_ancestor_first_and_reimports(
    open_store: StoreFactory, clock: FakeClock
) -> None:
    child = child_log(clock)
    parent = child.parent
    assert parent is not None
    data = child.export()
    source, target = open_store(), open_store()
    await import_log(source, data, tenant_id=TENANT)

    exported = await export_branch(source, child.header.branch_id)
    assert exported == data
    assert exported.startswith(parent.header.line + b"\n")
    assert (await source.get_branch(parent.header.branch_id)).head_seq == child.fork_at_seq

    result = await import_log(target, exported, tenant_id=TENANT)
    assert (result.branch_id, result.stored) == (child.header.branch_id, True)
    assert await export_branch(target, child.header.branch_id) == data
    assert not (await import_log(target, exported, tenant_id=TENANT)).stored
    branches = await target.list_branches(child.header.thread_id)
    assert [b.branch_id for b in branches] == [parent.header.branch_id, child.header.branch_id]


async def test_child_import_into_a_store_holding_the_grown_parent(
    store: Store, clock: FakeClock
) -> None:
    child = child_log(clock)
    parent = child.parent
    assert parent is not None
    parent.turn(text="the parent went on after the fork")
    await import_log(store, parent.export(), tenant_id=TENANT)
    result = await import_log(store, child.export(), tenant_id=TENANT)
    assert result.stored
    assert await export_branch(store, child.header.branch_id) == child.export()
    assert await export_branch(store, parent.header.branch_id) == parent.export()


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "invalid_line"),
        (b"not json\n", "invalid_line"),
        (b'{"format":"threads.log"}\n', "invalid_line"),
    ],
    ids=["empty", "garbage", "bad_header"],
)
async def test_unreadable_export_stores_nothing(store: Store, data: bytes, code: str) -> None:
    with pytest.raises(LogError) as caught:
        await import_log(store, data, tenant_id=TENANT)
    assert caught.value.code == code
    assert await store.list_threads() == []


async def test_semantic_rule_broken_stores_nothing(store: Store, clock: FakeClock) -> None:
    log = root_log(clock, turns=1)
    log.add("turn_completed", {"reason": "end_turn"})  # no open turn
    with pytest.raises(LogError) as caught:
        await import_log(store, log.export(), tenant_id=TENANT)
    assert (caught.value.code, caught.value.seq) == ("invalid_transition", log.last_seq)
    assert await store.list_threads() == []
