"""Control items on every engine: a queued cancel is queued once per thread and command, and is
consumed by compare-and-set in the transaction of the append that applies it (a second
application rolls its append back)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from postgres_support import drop_store, needs_postgres, open_postgres
from threads import sqlite
from threads.clock import FakeClock
from threads.errors import StoreError
from threads.store.capabilities import controls_of
from threads.store.postgres.controls import PostgresControls
from threads.store.protocol import Lease, Store
from threads.testing.sample_log import SampleLog

TENANT = "acme"
ALICE = {"issuer": "api", "tenant": TENANT, "subject": "alice"}


async def _started(store: Store, clock: FakeClock) -> tuple[SampleLog, Lease]:
    """A new thread, leased by ``h1``, its ``thread_started`` stored (seq 1)."""
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id=TENANT)
    lease = await store.acquire_lease(log.header.branch_id, "h1", 30_000)
    log.epoch = lease.epoch
    await store.append(log.header.branch_id, [log.started()], expected_seq=0, lease=lease)
    return log, lease


async def test_queue_once_apply_once(store: Store, clock: FakeClock) -> None:
    controls = controls_of(store)
    assert controls is not None
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id=TENANT)
    lease = await store.acquire_lease(log.header.branch_id, "h1", 30_000)
    log.epoch = lease.epoch
    tid = log.header.thread_id
    await store.append(log.header.branch_id, [log.started()], expected_seq=0, lease=lease)

    key = await controls.queue_control(
        tenant_id=TENANT, thread_id=tid, principal=ALICE, command="cancel")
    again = await controls.queue_control(
        tenant_id=TENANT, thread_id=tid, principal=ALICE, command="cancel")
    assert again == key
    (item,) = await controls.pending_controls(tid)
    assert (item.item_key, item.command, item.principal) == (key, "cancel", ALICE)
    assert await controls.pending_controls("another-thread") == []

    first, second = log.turn()[:2]
    await store.append(log.header.branch_id, [first], expected_seq=1, lease=lease,
                       consumes=[item.inbox_id])
    assert await controls.pending_controls(tid) == []
    with pytest.raises(StoreError) as lost:
        await store.append(log.header.branch_id, [second], expected_seq=2, lease=lease,
                           consumes=[item.inbox_id])
    assert lost.value.code == "control_consumed"
    assert (await store.get_branch(log.header.branch_id)).head_seq == 2  # rolled back
    assert await controls.consume_control(item.inbox_id, 2) is False

    fresh = await controls.queue_control(
        tenant_id=TENANT, thread_id=tid, principal=ALICE, command="cancel")
    assert fresh != key  # the consumed one no longer answers
    (waiting,) = await controls.pending_controls(tid)
    assert await controls.consume_control(waiting.inbox_id, 2) is True
    assert await controls.pending_controls(tid) == []


async def test_an_append_answers_the_next_look_with_what_it_read(
    store: Store, clock: FakeClock
) -> None:
    """``as_of`` the head an append of this store object made, the answer is the inbox as that
    append's transaction read it: an item queued before it is there, one queued through this
    store object after it is seen too (the view is dropped), and the plain look always reads."""
    controls = controls_of(store)
    assert controls is not None
    log, lease = await _started(store, clock)
    branch, tid = log.header.branch_id, log.header.thread_id
    assert await controls.pending_controls(tid, as_of=(branch, 1)) == []

    key = await controls.queue_control(
        tenant_id=TENANT, thread_id=tid, principal=ALICE, command="cancel")
    (queued,) = await controls.pending_controls(tid, as_of=(branch, 1))
    assert queued.item_key == key
    first = log.turn()[0]
    await store.append(branch, [first], expected_seq=1, lease=lease)
    (seen,) = await controls.pending_controls(tid, as_of=(branch, 2))
    assert seen.item_key == key
    assert await controls.consume_control(seen.inbox_id, 2) is True
    assert await controls.pending_controls(tid, as_of=(branch, 2)) == []
    assert await controls.pending_controls(tid, as_of=(branch, 99)) == []  # never a head here


@needs_postgres
async def test_on_postgres_a_grouped_append_reads_the_inbox_for_the_next_look() -> None:
    """The look ``as_of`` a grouped append is answered from what that append's transaction
    read, with no connection taken; an item another host queues after it shows at the next
    append's look."""
    clock = FakeClock()
    host, other = open_postgres(clock), None
    try:
        other = open_postgres(clock, host.schema)
        controls, others = PostgresControls(host), PostgresControls(other)
        log, lease = await _started(host, clock)
        branch, tid = log.header.branch_id, log.header.thread_id
        assert await controls.pending_controls(tid, as_of=(branch, 1)) == []  # reads: a miss
        key = await others.queue_control(
            tenant_id=TENANT, thread_id=tid, principal=ALICE, command="cancel")
        first, second = log.turn()[:2]
        await host.append(branch, [first], expected_seq=1, lease=lease)
        late = await others.queue_control(
            tenant_id=TENANT, thread_id=tid, principal=ALICE, command="stop_when_idle")

        def no_connection() -> None:
            raise AssertionError("the look took a connection")

        real = host._conn
        host._conn = no_connection  # type: ignore[assignment,method-assign]
        (seen,) = await controls.pending_controls(tid, as_of=(branch, 2))
        host._conn = real  # type: ignore[method-assign]
        assert seen.item_key == key
        await host.append(branch, [second], expected_seq=2, lease=lease)
        keys = [i.item_key for i in await controls.pending_controls(tid, as_of=(branch, 3))]
        assert keys == [key, late]
    finally:
        await host.close()
        if other is not None:
            await other.close()
        await drop_store(host)


async def test_an_item_another_writer_queued_after_an_append_is_seen_at_the_next(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Another store object on the same directory (another process) queues after this one's
    append committed: the look as of that head may miss it, the plain look and the look as of
    the next append's head both see it."""
    ours, theirs = sqlite(tmp_path / "s", clock=clock), sqlite(tmp_path / "s", clock=clock)
    try:
        controls, other = controls_of(ours), controls_of(theirs)
        assert controls is not None
        assert other is not None
        log, lease = await _started(ours, clock)
        branch, tid = log.header.branch_id, log.header.thread_id
        key = await other.queue_control(
            tenant_id=TENANT, thread_id=tid, principal=ALICE, command="cancel")
        assert await controls.pending_controls(tid, as_of=(branch, 1)) == []
        assert [i.item_key for i in await controls.pending_controls(tid)] == [key]
        await ours.append(branch, [log.turn()[0]], expected_seq=1, lease=lease)
        (seen,) = await controls.pending_controls(tid, as_of=(branch, 2))
        assert seen.item_key == key
    finally:
        await ours.close()
        await theirs.close()


@needs_postgres
async def test_on_postgres_looks_that_wait_together_are_one_read() -> None:
    """Looks of several threads asked at once take one connection for one statement, and each
    hears only its own thread's items."""
    clock = FakeClock()
    store = open_postgres(clock)
    try:
        controls = PostgresControls(store)
        logs = [(await _started(store, clock))[0] for _ in range(3)]
        tids = [log.header.thread_id for log in logs]
        key = await controls.queue_control(
            tenant_id=TENANT, thread_id=tids[1], principal=ALICE, command="cancel")
        taken = 0
        real = store._conn

        def counted() -> Any:
            nonlocal taken
            taken += 1
            return real()

        store._conn = counted  # type: ignore[method-assign]
        looks = await asyncio.gather(*(controls.pending_controls(t) for t in [*tids, tids[1]]))
        assert [[i.item_key for i in items] for items in looks] == [[], [key], [], [key]]
        assert taken == 1
    finally:
        await store.close()
        await drop_store(store)
