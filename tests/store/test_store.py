"""The ``Store`` protocol suite: appends, fencing, leases, artifacts and read-time checks.

Written against the protocol through the ``store`` fixture, so every engine in ``ENGINES``
runs it. Engine-specific tampering (editing stored bytes) goes through ``tamper``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pytest

from threads.clock import FakeClock
from threads.errors import LogError, NotFoundError, StoreError
from threads.log.hashing import sha256_hex
from threads.log.lines import Event
from threads.log.verify import verify_export
from threads.store.protocol import Lease, PendingArtifact, Segment, Store
from threads.store.sqlite import sqlite
from threads.store.transfer import export_branch
from threads.testing.sample_log import USER, SampleLog

TENANT = "acme"
TTL = 30_000


class Tamper(Protocol):
    """Edits a store's bytes behind its back (provided per engine by ``conftest.tamper``)."""

    def replace_line(self, branch_id: str, seq: int, line: bytes) -> None: ...

    def flip_artifact_byte(self, sha256: str) -> None: ...


async def new_thread(store: Store, clock: FakeClock) -> SampleLog:
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id=TENANT)
    return log


async def write_turn(store: Store, log: SampleLog, lease: Lease) -> list[Event]:
    """Append one event per transaction, the way the run loop does."""
    log.epoch = lease.epoch
    expected = log.last_seq
    events = [log.started()] if not log.events and log.parent is None else []
    events += log.turn()
    for event in events:
        await store.append(log.header.branch_id, [event], expected_seq=expected, lease=lease)
        expected = event.seq
    return events


async def stored_lines(store: Store, branch_id: str) -> list[bytes]:
    chain = await store.read_chain(branch_id)
    return [line for s in chain.segments for line in (s.header.line, *(e.line for e in s.events))]


async def expect_code(code: str, awaitable: object) -> StoreError:
    with pytest.raises(StoreError) as caught:
        await awaitable  # type: ignore[misc]
    assert caught.value.code == code
    return caught.value


# ---- appends and reads ---------------------------------------------------------------------


async def test_append_and_read_chain_round_trip_bytes(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, lease)
    await write_turn(store, log, lease)

    assert await stored_lines(store, log.header.branch_id) == log.lines()
    branch = await store.get_branch(log.header.branch_id)
    assert (branch.head_seq, branch.head_hash) == (log.last_seq, log.last_hash)
    assert branch.head_verified
    assert [t.thread_id for t in await store.list_threads()] == [log.header.thread_id]
    assert (await store.root_branch(log.header.thread_id)).branch_id == log.header.branch_id


async def test_batch_append_is_one_transaction(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    events = [log.started(), *log.turn()]
    await store.append(log.header.branch_id, events, expected_seq=0, lease=lease)
    assert await stored_lines(store, log.header.branch_id) == log.lines()


async def test_wrong_expected_seq_is_seq_conflict_and_writes_nothing(
    store: Store, clock: FakeClock
) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, lease)
    before = await stored_lines(store, log.header.branch_id)
    late = log.add("user_input", {"source": "api", "text": "again"}, USER)

    await expect_code(
        "seq_conflict",
        store.append(log.header.branch_id, [late], expected_seq=late.seq - 2, lease=lease),
    )
    assert await stored_lines(store, log.header.branch_id) == before


async def test_unknown_branch_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.read_chain("0192b000-0000-7000-8000-00000000dead")


async def test_creating_an_existing_branch_is_seq_conflict(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    await expect_code("seq_conflict", store.create_branch(log.header, tenant_id=TENANT))


# ---- fencing -------------------------------------------------------------------------------


async def _refused_append(store: Store, log: SampleLog, lease: Lease) -> None:
    """The append under ``lease`` is ``stale_epoch`` and the branch is unchanged."""
    before = await stored_lines(store, log.header.branch_id)
    log.epoch = lease.epoch
    event = log.add("user_input", {"source": "api", "text": "late"}, USER)
    await expect_code(
        "stale_epoch",
        store.append(log.header.branch_id, [event], expected_seq=event.seq - 1, lease=lease),
    )
    log.events.pop()
    assert await stored_lines(store, log.header.branch_id) == before


async def test_foreign_lease_is_stale_epoch(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    real = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, real)
    forged = Lease(log.header.branch_id, "intruder", real.epoch, real.expires_at)
    await _refused_append(store, log, forged)


async def test_expired_lease_is_stale_epoch(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, lease)
    clock.advance(TTL)
    await _refused_append(store, log, lease)


async def test_older_epoch_is_stale_epoch(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    first = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, first)
    second = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    assert second.epoch == first.epoch + 1
    await _refused_append(store, log, first)


async def test_lease_of_another_branch_is_stale_epoch(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, lease)
    other = await new_thread(store, clock)
    elsewhere = await store.acquire_lease(other.header.branch_id, "runner-1", TTL)
    await _refused_append(store, log, elsewhere)


# ---- leases --------------------------------------------------------------------------------


async def test_live_foreign_lease_is_branch_busy(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    held = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    clock.advance(TTL - 1)
    await expect_code("branch_busy", store.acquire_lease(log.header.branch_id, "runner-2", TTL))
    await store.check_lease(held)


async def test_takeover_after_expiry_fences_the_old_holder(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    old = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, old)
    clock.advance(TTL)
    new = await store.acquire_lease(log.header.branch_id, "runner-2", TTL)

    assert new.epoch == old.epoch + 1
    await expect_code("stale_epoch", store.check_lease(old))
    await write_turn(store, log, new)
    assert await stored_lines(store, log.header.branch_id) == log.lines()


async def test_release_keeps_the_epoch_moving(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    first = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    assert first.epoch == 1
    await write_turn(store, log, first)
    await store.release_lease(first)
    await expect_code("stale_epoch", store.check_lease(first))
    second = await store.acquire_lease(log.header.branch_id, "runner-2", TTL)
    assert second.epoch == 2


async def test_chain_epoch_above_lease_epoch_wins(store: Store, clock: FakeClock) -> None:
    """An imported chain written at epoch 7 elsewhere: the first local lease is max(0, 7) + 1."""
    log = SampleLog(clock, epoch=7)
    log.started()
    log.turn()
    await _store_imported(store, log)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    assert lease.epoch == 8
    await write_turn(store, log, lease)
    await store.release_lease(lease)
    assert (await store.acquire_lease(log.header.branch_id, "runner-2", TTL)).epoch == 9


async def test_child_branch_epoch_continues_the_parent_chain(
    store: Store, clock: FakeClock
) -> None:
    root = SampleLog(clock, epoch=5)
    root.started()
    root.turn()
    root.snapshot()
    await _store_imported(store, root)
    child = root.branch()
    await store.create_branch(
        child.header,
        tenant_id=TENANT,
        parent_branch_id=root.header.branch_id,
        fork_at_seq=child.fork_at_seq,
    )
    lease = await store.acquire_lease(child.header.branch_id, "runner-1", TTL)
    assert lease.epoch == 6
    child.epoch = lease.epoch
    fork = child.fork_event()
    await store.append(child.header.branch_id, [fork], expected_seq=fork.seq - 1, lease=lease)
    chain = await store.read_chain(child.header.branch_id)
    assert [s.header.branch_id for s in chain.segments] == [
        root.header.branch_id,
        child.header.branch_id,
    ]
    assert chain.events[-1].seq == root.last_seq + 1
    assert chain.events[-1].type == "fork"
    assert [e.line for e in chain.events] == [e.line for e in (*root.events, fork)]


async def test_renew_never_revives_a_lost_lease(store: Store, clock: FakeClock) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    renewed = await store.renew_lease(lease, TTL)
    assert renewed.expires_at == clock.now_ms() + TTL
    clock.advance(TTL)
    await expect_code("stale_epoch", store.renew_lease(renewed, TTL))
    await store.acquire_lease(log.header.branch_id, "runner-2", TTL)
    await expect_code("stale_epoch", store.renew_lease(renewed, TTL))


async def _store_imported(store: Store, log: SampleLog) -> None:
    await store.store_segment(
        Segment(log.header, log.events, None),
        tenant_id=TENANT,
        parent_branch_id=None,
        head_verified=True,
        dropped_ref=None,
    )


# ---- artifacts -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [10, 2 * 1024 * 1024 + 1], ids=["small", "large"])
async def test_artifact_round_trip(store: Store, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    ref = await store.put_artifact(data, "application/octet-stream")
    assert ref["bytes"] == size
    assert await store.get_artifact(ref["sha256"]) == data
    assert await store.put_artifact(data, "application/octet-stream") == ref


@pytest.mark.parametrize("size", [10, 2 * 1024 * 1024 + 1], ids=["small", "large"])
async def test_changed_artifact_bytes_are_artifact_corrupt(
    store: Store, tamper: Tamper, size: int
) -> None:
    ref = await store.put_artifact(b"a" * size, "text/plain")
    tamper.flip_artifact_byte(ref["sha256"])
    await expect_code("artifact_corrupt", store.get_artifact(ref["sha256"]))


async def test_missing_artifact(store: Store) -> None:
    await expect_code("artifact_missing", store.get_artifact("0" * 64))


# ---- read-time checks ----------------------------------------------------------------------


async def test_edited_stored_line_is_log_corrupt_with_its_seq(
    store: Store, tamper: Tamper, clock: FakeClock
) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, lease)
    edited = log.events[2]
    tamper.replace_line(
        log.header.branch_id, edited.seq, edited.line.replace(b'"attempt":1', b'"attempt":2')
    )
    error = await expect_code("log_corrupt", store.read_chain(log.header.branch_id))
    assert error.seq == edited.seq  # the damaged line itself, not the next one


DAMAGES = {
    "cut short": lambda line: line[:-7],
    "a key renamed": lambda line: line.replace(b'"seq":', b'"sez":'),
    "not an object": lambda line: b"[" + line + b"]",
    "bytes that are not UTF-8": lambda line: line.replace(b'"host"', b'"\xff\xfe"'),
    "cut short after a run of 16 digits": lambda line: line[:-1] + b',"n":1234567890123456',
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
async def test_a_stored_line_that_no_longer_decodes_is_log_corrupt_with_its_seq(
    store: Store, tamper: Tamper, clock: FakeClock, damage: Callable[[bytes], bytes]
) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, lease)
    damaged = log.events[2]
    tamper.replace_line(log.header.branch_id, damaged.seq, damage(damaged.line))
    error = await expect_code("log_corrupt", store.read_chain(log.header.branch_id))
    assert error.seq == damaged.seq


@pytest.mark.parametrize("later", ["cut short", "a key renamed"])
async def test_of_two_damaged_lines_the_first_is_named(
    store: Store, tamper: Tamper, clock: FakeClock, later: str
) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, lease)
    first, second = log.events[1], log.events[3]
    tamper.replace_line(log.header.branch_id, first.seq, DAMAGES["a key renamed"](first.line))
    tamper.replace_line(log.header.branch_id, second.seq, DAMAGES[later](second.line))
    error = await expect_code("log_corrupt", store.read_chain(log.header.branch_id))
    assert error.seq == first.seq


async def test_a_corrupt_branch_exports_for_inspection_as_stored(
    store: Store, tamper: Tamper, clock: FakeClock
) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    await write_turn(store, log, lease)
    edited = log.events[2]
    changed = edited.line.replace(b'"attempt":1', b'"attempt":2')
    tamper.replace_line(log.header.branch_id, edited.seq, changed)
    await expect_code("log_corrupt", export_branch(store, log.header.branch_id))
    raw = await export_branch(store, log.header.branch_id, inspect=True)
    lines = raw.split(b"\n")
    assert lines[0] == log.header.line
    assert lines[edited.seq] == changed  # the stored bytes, as they are
    with pytest.raises(LogError) as refused:
        verify_export(raw)  # ...and the export fails exactly where the branch is corrupt
    assert (refused.value.code, refused.value.seq) == ("prev_hash_mismatch", edited.seq + 1)


async def test_append_stores_its_artifacts_in_the_same_transaction(
    store: Store, clock: FakeClock
) -> None:
    log = await new_thread(store, clock)
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", TTL)
    log.epoch = lease.epoch
    started = log.started()
    request = b'{"role":"user"}\n'
    refused = store.append(
        log.header.branch_id,
        [started],
        expected_seq=5,
        lease=lease,
        artifacts=[PendingArtifact(request, "application/x-ndjson")],
    )
    await expect_code("seq_conflict", refused)
    await expect_code("artifact_missing", store.get_artifact(sha256_hex(request)))
    await store.append(
        log.header.branch_id,
        [started],
        expected_seq=0,
        lease=lease,
        artifacts=[PendingArtifact(request, "application/x-ndjson")],
    )
    assert await store.get_artifact(sha256_hex(request)) == request


# ---- engine-specific: SQLite file format ---------------------------------------------------


async def test_sqlite_schema_version_mismatch_is_unsupported_format(tmp_path: Path) -> None:
    root = tmp_path / "newer"
    root.mkdir()
    with sqlite3.connect(root / "threads.db") as conn:
        conn.execute("PRAGMA user_version = 7")
    conn.close()
    store = sqlite(root)
    try:
        await expect_code("unsupported_format", store.list_threads())
    finally:
        await store.close()
