"""A thread handle reads and folds its log once, and never answers from a stale fold: an
append by another store object or another process, or a branch state change, is seen by the
next read, and a chain damaged meanwhile is ``log_corrupt`` then, not an old answer."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from threads import open_thread
from threads.clock import FakeClock
from threads.errors import StoreError
from threads.run.thread import Thread
from threads.store.protocol import Chain
from threads.store.sqlite import SQLiteStore, sqlite
from threads.testing.sample_log import SampleLog

TENANT = "local"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def log(tmp_path: Path, clock: FakeClock) -> SampleLog:
    """A thread of one completed turn in the store at ``tmp_path``, written by a store object
    that is closed before the test opens its own."""
    log = SampleLog(clock)
    writer = sqlite(tmp_path, clock=clock)
    await writer.create_branch(log.header, tenant_id=TENANT)
    await append_turn(writer, log)
    await writer.close()
    return log


async def append_turn(store: SQLiteStore, log: SampleLog) -> None:
    lease = await store.acquire_lease(log.header.branch_id, "writer", 30_000)
    log.epoch = lease.epoch
    events = ([log.started()] if not log.events else []) + log.turn()
    await store.append(log.header.branch_id, events, expected_seq=events[0].seq - 1, lease=lease)
    await store.release_lease(lease)


class CountingStore(SQLiteStore):
    reads = 0

    async def read_chain(self, branch_id: str) -> Chain:
        self.reads += 1
        return await super().read_chain(branch_id)


@pytest.fixture
async def reader(tmp_path: Path, clock: FakeClock) -> AsyncIterator[CountingStore]:
    store = CountingStore(tmp_path, clock=clock)
    yield store
    await store.close()


async def opened(reader: CountingStore, log: SampleLog) -> Thread:
    return await open_thread(reader, log.header.thread_id)


async def test_open_then_state_reads_and_folds_the_log_once(
    reader: CountingStore, log: SampleLog
) -> None:
    thread = await opened(reader, log)
    state = await thread.state()
    assert (await thread.timeline())[-1].seq == state.head.seq == log.last_seq
    assert reader.reads == 1


async def test_an_append_through_another_store_object_is_seen(
    tmp_path: Path, clock: FakeClock, reader: CountingStore, log: SampleLog
) -> None:
    thread = await opened(reader, log)
    before = await thread.state()
    other = sqlite(tmp_path, clock=clock)
    try:
        await append_turn(other, log)
    finally:
        await other.close()
    after = await thread.state()
    assert after.head.seq == log.last_seq > before.head.seq
    assert after.head.hash == log.last_hash
    assert after.turns_completed == before.turns_completed + 1
    assert [e.line for e in await thread.timeline()] == [e.line for e in log.events]


async def test_an_append_by_another_process_is_seen(
    tmp_path: Path, reader: CountingStore, log: SampleLog
) -> None:
    thread = await opened(reader, log)
    before = await thread.state()
    script = textwrap.dedent(
        f"""
        import asyncio
        from threads.clock import SystemClock
        from threads.store.sqlite import sqlite
        from threads.testing.sample_log import SampleLog

        async def main():
            store = sqlite({str(tmp_path)!r})
            branch = await store.root_branch({log.header.thread_id!r})
            lease = await store.acquire_lease(branch.branch_id, "other-process", 30_000)
            chain = await store.read_chain(branch.branch_id)
            log = SampleLog(SystemClock())
            log.header, log.events = chain.segments[0].header, chain.events
            log.epoch = lease.epoch
            events = log.turn()
            await store.append(branch.branch_id, events, expected_seq=events[0].seq - 1,
                               lease=lease)
            await store.close()

        asyncio.run(main())
        """
    )
    await asyncio.to_thread(subprocess.run, [sys.executable, "-c", script], check=True, timeout=120)
    after = await thread.state()
    assert after.turns_completed == before.turns_completed + 1
    assert after.head.seq > before.head.seq
    assert reader.reads == 2


async def test_a_branch_state_change_alone_is_read_again(
    tmp_path: Path, clock: FakeClock, reader: CountingStore, log: SampleLog
) -> None:
    thread = await opened(reader, log)
    other = sqlite(tmp_path, clock=clock)
    try:
        await other.set_branch_state(log.header.branch_id, "read_only")
    finally:
        await other.close()
    await thread.state()
    assert reader.reads == 2


async def test_a_chain_damaged_behind_the_handle_is_log_corrupt_once_it_moves(
    tmp_path: Path, clock: FakeClock, reader: CountingStore, log: SampleLog
) -> None:
    thread = await opened(reader, log)
    damaged = log.events[1]
    other = sqlite(tmp_path, clock=clock)
    try:
        await append_turn(other, log)
    finally:
        await other.close()
    conn = sqlite3.connect(tmp_path / "threads.db")
    with conn:
        conn.execute(
            "UPDATE events SET line = ? WHERE branch_id = ? AND seq = ?",
            (damaged.line.replace(b'"api"', b'"apj"'), log.header.branch_id, damaged.seq),
        )
    conn.close()
    with pytest.raises(StoreError) as raised:
        await thread.state()
    assert (raised.value.code, raised.value.seq) == ("log_corrupt", damaged.seq)
