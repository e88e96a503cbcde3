"""Control items on every engine: a queued cancel is queued once per thread and command, and is
consumed by compare-and-set in the transaction of the append that applies it (a second
application rolls its append back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from threads import sqlite
from threads.clock import FakeClock
from threads.errors import StoreError
from threads.store.capabilities import controls_of
from threads.store.protocol import Store
from threads.testing.sample_log import SampleLog

TENANT = "acme"
ALICE = {"issuer": "api", "tenant": TENANT, "subject": "alice"}


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
    log = SampleLog(clock)
    branch, tid = log.header.branch_id, log.header.thread_id
    await store.create_branch(log.header, tenant_id=TENANT)
    lease = await store.acquire_lease(branch, "h1", 30_000)
    log.epoch = lease.epoch
    await store.append(branch, [log.started()], expected_seq=0, lease=lease)
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
        log = SampleLog(clock)
        branch, tid = log.header.branch_id, log.header.thread_id
        await ours.create_branch(log.header, tenant_id=TENANT)
        lease = await ours.acquire_lease(branch, "h1", 30_000)
        log.epoch = lease.epoch
        await ours.append(branch, [log.started()], expected_seq=0, lease=lease)
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
