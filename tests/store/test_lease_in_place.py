"""A run's lease operations and its short reads of the branch run in place on the event loop's
thread while the process holds no other lease through the store: no hand-off to the store
thread, the same transaction and checks. With another lease held, or a write lock another
process holds, they go to the store thread as before."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from handoff_support import Handoffs

from threads.clock import FakeClock
from threads.errors import StoreError
from threads.store.sqlite import SQLiteStore, sqlite
from threads.testing.sample_log import SampleLog

TENANT = "acme"
TTL = 30_000


async def _branch(store: SQLiteStore) -> SampleLog:
    log = SampleLog(FakeClock())
    await store.create_branch(log.header, tenant_id=TENANT)
    return log


def _lease_row(path: Path, branch_id: str) -> tuple[Any, ...]:
    other = sqlite3.connect(path / "threads.db")  # another process's view
    try:
        row: tuple[Any, ...] = other.execute(
            "SELECT holder_id, epoch, expires_at FROM leases WHERE branch_id = ?", (branch_id,)
        ).fetchone()
        return row
    finally:
        other.close()


async def test_a_lone_runs_lease_and_branch_reads_run_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite(tmp_path)
    log = await _branch(store)
    branch_id = log.header.branch_id
    handoffs = Handoffs(monkeypatch)
    assert (await store.root_branch(log.header.thread_id)).branch_id == branch_id
    assert await store.read_lease(branch_id) is None
    lease = await store.acquire_lease(branch_id, "w1", TTL)
    assert _lease_row(tmp_path, branch_id)[:2] == (lease.holder_id, lease.epoch)  # committed
    held = await store.read_lease(branch_id)
    assert held is not None
    assert held.holder_id == lease.holder_id
    await store.release_lease(lease)
    assert _lease_row(tmp_path, branch_id)[2] == 0
    assert handoffs.jobs == 0
    await store.close()


async def test_with_another_lease_held_an_acquire_goes_to_the_store_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite(tmp_path)
    first, second = await _branch(store), await _branch(store)
    handoffs = Handoffs(monkeypatch)
    held = await store.acquire_lease(first.header.branch_id, "w1", TTL)
    assert handoffs.jobs == 0
    other = await store.acquire_lease(second.header.branch_id, "w2", TTL)
    assert handoffs.jobs == 1
    await store.release_lease(other)  # one lease is left: the release goes to the thread
    assert handoffs.jobs == 2
    await store.release_lease(held)  # none: in place again
    assert handoffs.jobs == 2
    await store.close()


async def test_a_refusal_in_place_is_coded_and_changes_nothing(tmp_path: Path) -> None:
    """Another process holds the branch: its acquire in place is refused with ``branch_busy``
    and the lease row still names the holder."""
    holder = sqlite(tmp_path)
    log = await _branch(holder)
    branch_id = log.header.branch_id
    lease = await holder.acquire_lease(branch_id, "w1", TTL)
    stranger = sqlite(tmp_path)
    with pytest.raises(StoreError) as refused:
        await stranger.acquire_lease(branch_id, "w2", TTL)
    assert refused.value.code == "branch_busy"
    assert _lease_row(tmp_path, branch_id)[:2] == (lease.holder_id, lease.epoch)
    await stranger.close()
    await holder.close()


async def test_a_write_lock_held_elsewhere_sends_the_acquire_to_the_store_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acquire does not wait for another process's write lock on the loop's thread: it
    queues at once for the store thread, which waits for the lock, and lands after it."""
    store = sqlite(tmp_path, busy_timeout_ms=60_000)
    log = await _branch(store)
    holder = sqlite3.connect(tmp_path / "threads.db", isolation_level=None,
                             check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    handoffs = Handoffs(monkeypatch)
    acquiring = asyncio.create_task(store.acquire_lease(log.header.branch_id, "w1", TTL))
    turns = 0
    while handoffs.jobs == 0:  # refused at BEGIN in place: queued
        await asyncio.sleep(0)
        turns += 1
        assert turns < 10_000
    assert not acquiring.done()
    holder.execute("COMMIT")
    lease = await acquiring
    holder.close()
    assert _lease_row(tmp_path, log.header.branch_id)[:2] == (lease.holder_id, lease.epoch)
    await store.close()
