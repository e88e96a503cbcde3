"""A read the run makes between its appends (the thread's pending control items, when no
append of this process noted them) is served in place on the event loop's thread while the
store thread is idle; a lock it meets sends it to the store thread instead, and any other
fault is coded as a store thread read would code it."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest
from handoff_support import Handoffs

from threads.clock import FakeClock
from threads.errors import StoreError
from threads.store.controls import StoreControls
from threads.store.sqlite import SQLiteStore, sqlite
from threads.testing.sample_log import SampleLog

TENANT = "acme"
PRINCIPAL = {"kind": "user", "id": "u-1", "tenant_id": TENANT}


async def _thread_with_a_queued_cancel(store: SQLiteStore) -> str:
    log = SampleLog(FakeClock())
    await store.create_branch(log.header, tenant_id=TENANT)
    await StoreControls(store).queue_control(
        tenant_id=TENANT, thread_id=log.header.thread_id, principal=PRINCIPAL, command="cancel"
    )
    return log.header.thread_id


async def test_pending_controls_are_read_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite(tmp_path)
    thread_id = await _thread_with_a_queued_cancel(store)
    handoffs = Handoffs(monkeypatch)
    items = await StoreControls(store).pending_controls(thread_id)
    assert [item.command for item in items] == ["cancel"]
    assert handoffs.jobs == 0
    await store.close()


async def test_a_read_that_meets_a_lock_is_made_by_the_store_thread(tmp_path: Path) -> None:
    store = sqlite(tmp_path)
    await store.list_threads(TENANT)  # the connection is open
    caller = threading.current_thread()
    ran_on: list[threading.Thread] = []

    def read(conn: sqlite3.Connection) -> int:
        ran_on.append(threading.current_thread())
        if threading.current_thread() is caller:
            raise sqlite3.OperationalError("database is locked")
        return int(conn.execute("SELECT 1").fetchone()[0])

    assert await store._read(read) == 1
    assert ran_on[0] is caller
    assert ran_on[-1] is not caller
    await store.close()


async def test_a_read_that_fails_in_place_is_coded(tmp_path: Path) -> None:
    store = sqlite(tmp_path)

    def read(conn: sqlite3.Connection) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    with pytest.raises(StoreError) as failed:
        await store._read(read)
    assert failed.value.code == "store_corrupt"
    await store.close()


async def test_a_read_waits_for_the_store_threads_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the store thread runs a job, a read is queued behind it, never run beside it."""
    store = sqlite(tmp_path)
    thread_id = await _thread_with_a_queued_cancel(store)
    busy, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        busy.set()
        release.wait()

    holding = asyncio.ensure_future(store._run(hold))
    await asyncio.sleep(0)  # submitted
    busy.wait()
    handoffs = Handoffs(monkeypatch)
    reading = asyncio.ensure_future(StoreControls(store).pending_controls(thread_id))
    await asyncio.sleep(0)  # it found the store thread busy, and queued
    assert not reading.done()
    release.set()
    await holding
    assert [item.command for item in await reading] == ["cancel"]
    assert handoffs.jobs == 1
    await store.close()


async def test_a_write_lock_held_elsewhere_does_not_stop_a_read_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the write lock (mid-append): a WAL reader needs no lock, so the
    read is still served in place, at once, and sees what was committed before."""
    store = sqlite(tmp_path)
    thread_id = await _thread_with_a_queued_cancel(store)
    holder = sqlite3.connect(tmp_path / "threads.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("UPDATE inbox SET consumed_seq = 1")  # not committed: not seen
    try:
        handoffs = Handoffs(monkeypatch)
        items = await asyncio.wait_for(StoreControls(store).pending_controls(thread_id), 5)
        assert [item.command for item in items] == ["cancel"]
        assert handoffs.jobs == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    await store.close()
