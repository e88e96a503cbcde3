"""The SQLite append of a process's only writer commits in place, on the event loop's thread:
no hand-off to the store thread, the same checks and the same durability. With a second writer
the appends queue for the store thread again, where they can share a transaction; and a write
lock another process holds never makes the event loop wait: that append waits its turn on the
store thread while the loop goes on. An append's artifact files are put first, in place too;
one that can't be put fails that append alone, before any of its events is written."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from threads.clock import FakeClock
from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.log.lines import Event
from threads.store.artifact_files import ArtifactFiles
from threads.store.protocol import Lease, PendingArtifact
from threads.store.sqlite import SQLiteStore, sqlite
from threads.store.sqlite.store import IN_PLACE_FILE_BYTES
from threads.store.sqlite.worker import StoreThread
from threads.testing.sample_log import USER, SampleLog

TENANT = "acme"
TTL = 30_000


class Handoffs:
    """Counts the appends handed to the store thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.grouped = 0
        real = StoreThread.run_grouped

        def counted(worker: StoreThread, item: Any, batch: Any) -> Any:
            self.grouped += 1
            return real(worker, item, batch)

        monkeypatch.setattr(StoreThread, "run_grouped", counted)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def handoffs(monkeypatch: pytest.MonkeyPatch) -> Handoffs:
    return Handoffs(monkeypatch)


async def _writer(store: SQLiteStore, clock: FakeClock, holder: str) -> tuple[SampleLog, Lease]:
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id=TENANT)
    lease = await store.acquire_lease(log.header.branch_id, holder, TTL)
    log.epoch = lease.epoch
    return log, lease


async def _append_turn(store: SQLiteStore, log: SampleLog, lease: Lease) -> None:
    events = ([log.started()] if log.last_seq == 0 else []) + log.turn()
    await store.append(log.header.branch_id, events, expected_seq=events[0].seq - 1, lease=lease)


async def test_the_only_writer_commits_in_place_and_durably(
    tmp_path: Path, clock: FakeClock, handoffs: Handoffs
) -> None:
    store = sqlite(tmp_path, clock=clock)
    log, lease = await _writer(store, clock, "w1")
    for _ in range(3):
        await _append_turn(store, log, lease)
    assert handoffs.grouped == 0
    # Committed for everyone: another connection (another process's view) reads it all.
    other = sqlite3.connect(tmp_path / "threads.db")
    (count,) = other.execute(
        "SELECT count(*) FROM events WHERE branch_id = ?", (log.header.branch_id,)
    ).fetchone()
    other.close()
    assert count == log.last_seq
    chain = await sqlite(tmp_path, clock=clock).read_chain(log.header.branch_id)
    assert chain.branch.head_seq == log.last_seq
    await store.close()


async def test_in_place_refusals_are_the_store_threads(
    tmp_path: Path, clock: FakeClock, handoffs: Handoffs
) -> None:
    """A holder whose lease was taken over is refused in place with ``stale_epoch``, nothing of
    its append is stored, and the writer that took over appends on in place."""
    store = sqlite(tmp_path, clock=clock)
    log, lease = await _writer(store, clock, "w1")
    await _append_turn(store, log, lease)
    head = log.last_seq
    clock.advance(TTL + 1)
    taken = await store.acquire_lease(log.header.branch_id, "w2", TTL)
    await store.release_lease(lease)  # the first holder's run ends: one writer again
    stale = log.turn()
    with pytest.raises(StoreError) as lost:
        await store.append(log.header.branch_id, stale, expected_seq=head, lease=lease)
    assert lost.value.code == "stale_epoch"
    assert (await store.read_chain(log.header.branch_id)).branch.head_seq == head
    del log.events[-len(stale):]
    log.epoch = taken.epoch
    await _append_turn(store, log, taken)
    assert (await store.read_chain(log.header.branch_id)).branch.head_seq == log.last_seq
    assert handoffs.grouped == 0
    await store.close()


async def test_a_second_writer_sends_appends_to_the_store_thread(
    tmp_path: Path, clock: FakeClock, handoffs: Handoffs
) -> None:
    store = sqlite(tmp_path, clock=clock)
    first, first_lease = await _writer(store, clock, "w1")
    second, second_lease = await _writer(store, clock, "w2")
    await asyncio.gather(
        _append_turn(store, first, first_lease), _append_turn(store, second, second_lease)
    )
    assert handoffs.grouped == 2
    await store.release_lease(second_lease)
    await _append_turn(store, first, first_lease)
    assert handoffs.grouped == 2  # alone again: in place
    await store.close()


async def test_a_write_lock_held_elsewhere_never_stalls_the_loop(
    tmp_path: Path, clock: FakeClock, handoffs: Handoffs
) -> None:
    """Another connection holds the write lock: the append does not wait for it on the loop's
    thread (the loop keeps turning), waits on the store thread instead, and lands once the
    lock is let go."""
    store = sqlite(tmp_path, clock=clock, busy_timeout_ms=60_000)
    log, lease = await _writer(store, clock, "w1")
    await _append_turn(store, log, lease)
    holder = sqlite3.connect(tmp_path / "threads.db", isolation_level=None,
                             check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    late = log.add("user_input", {"source": "api", "text": "late"}, USER)
    appending = asyncio.create_task(
        store.append(log.header.branch_id, [late], expected_seq=late.seq - 1, lease=lease)
    )
    turns = 0
    while handoffs.grouped == 0:  # the append gave up its place at once, and queued
        await asyncio.sleep(0)
        turns += 1
        assert turns < 10_000
    assert not appending.done()
    released = threading.Event()

    def release() -> None:
        holder.execute("COMMIT")
        released.set()

    asyncio.get_running_loop().call_soon(release)
    await appending
    assert released.is_set()
    holder.close()
    assert (await store.read_chain(log.header.branch_id)).branch.head_seq == late.seq
    # the store thread's connection (what queues) still waits its busy timeout for a lock
    timeout = await store._run(lambda conn: conn.execute("PRAGMA busy_timeout").fetchone()[0])
    assert timeout == 60_000
    await store.close()


async def test_a_connection_that_cannot_open_in_place_leaves_the_append_to_the_thread(
    tmp_path: Path, clock: FakeClock, handoffs: Handoffs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening the in-place connection meets a lock (another process mid-checkpoint, say): the
    append is not failed for it, it is committed by the store thread."""
    store = sqlite(tmp_path, clock=clock)
    log, lease = await _writer(store, clock, "w1")

    def locked() -> sqlite3.Connection:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(store, "_here_connection", locked)
    await _append_turn(store, log, lease)
    assert handoffs.grouped == 1
    assert (await store.read_chain(log.header.branch_id)).branch.head_seq == log.last_seq
    await store.close()


async def _store_with_a_turn(
    tmp_path: Path, clock: FakeClock, **options: Any
) -> tuple[SQLiteStore, SampleLog, Lease]:
    store = sqlite(tmp_path, clock=clock, **options)
    log, lease = await _writer(store, clock, "w1")
    await _append_turn(store, log, lease)
    return store, log, lease


def _append_with_file(
    store: SQLiteStore, log: SampleLog, lease: Lease, data: bytes
) -> tuple[Event, Coroutine[Any, Any, None]]:
    """The next event, and its append carrying ``data`` as an artifact file (not awaited)."""
    event = log.add("user_input", {"source": "api", "text": "with a file"}, USER)
    append = store.append(log.header.branch_id, [event], expected_seq=event.seq - 1, lease=lease,
                          artifacts=[PendingArtifact(data, "text/plain")])
    return event, append


async def test_an_appends_file_is_put_in_place_before_its_events(
    tmp_path: Path, clock: FakeClock, handoffs: Handoffs
) -> None:
    store, log, lease = await _store_with_a_turn(tmp_path, clock)
    result = b"the tool's result, kept as a file"
    event, append = _append_with_file(store, log, lease, result)
    await append
    assert handoffs.grouped == 0
    path = ArtifactFiles(tmp_path).path(sha256_hex(result))
    assert path.read_bytes() == result
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert (await store.read_chain(log.header.branch_id)).branch.head_seq == event.seq
    await store.close()


async def test_a_large_file_is_put_by_the_store_thread(
    tmp_path: Path, clock: FakeClock, handoffs: Handoffs
) -> None:
    """A large output is not written on the loop's thread: that append queues."""
    store, log, lease = await _store_with_a_turn(tmp_path, clock)
    output = b"x" * (IN_PLACE_FILE_BYTES + 1)
    await _append_with_file(store, log, lease, output)[1]
    assert handoffs.grouped == 1
    assert ArtifactFiles(tmp_path).path(sha256_hex(output)).read_bytes() == output
    await store.close()


async def test_a_file_that_cannot_be_put_fails_its_append_alone(
    tmp_path: Path, clock: FakeClock, handoffs: Handoffs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk is full when the file is put: the append is refused with ``store_full`` and
    none of its events is written; once there is room, the same append lands."""
    store, log, lease = await _store_with_a_turn(tmp_path, clock)
    head = log.last_seq
    real_put = ArtifactFiles.put

    def full(files: ArtifactFiles, data: bytes) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ArtifactFiles, "put", full)
    event, append = _append_with_file(store, log, lease, b"a result")
    with pytest.raises(StoreError) as refused:
        await append
    assert refused.value.code == "store_full"
    assert (await store.read_chain(log.header.branch_id)).branch.head_seq == head
    monkeypatch.setattr(ArtifactFiles, "put", real_put)
    await store.append(log.header.branch_id, [event], expected_seq=head, lease=lease,
                       artifacts=[PendingArtifact(b"a result", "text/plain")])
    assert (await store.read_chain(log.header.branch_id)).branch.head_seq == event.seq
    assert handoffs.grouped == 0
    await store.close()


async def test_a_file_put_in_place_then_a_lock_elsewhere_lands_on_the_store_thread(
    tmp_path: Path, clock: FakeClock, handoffs: Handoffs
) -> None:
    """The file is put, then ``BEGIN`` meets another process's write lock: the append goes to
    the store thread, which finds the file already there and commits once the lock is gone."""
    store, log, lease = await _store_with_a_turn(tmp_path, clock, busy_timeout_ms=60_000)
    holder = sqlite3.connect(tmp_path / "threads.db", isolation_level=None,
                             check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    result = b"a result put before the lock was met"
    event, append = _append_with_file(store, log, lease, result)
    appending = asyncio.create_task(append)
    turns = 0
    while handoffs.grouped == 0:  # put, then refused at BEGIN: queued
        await asyncio.sleep(0)
        turns += 1
        assert turns < 10_000
    assert ArtifactFiles(tmp_path).path(sha256_hex(result)).read_bytes() == result
    holder.execute("COMMIT")
    await appending
    holder.close()
    assert (await store.read_chain(log.header.branch_id)).branch.head_seq == event.seq
    await store.close()
