"""Control items on every engine: a queued cancel is queued once per thread and command, and is
consumed by compare-and-set in the transaction of the append that applies it (a second
application rolls its append back)."""

from __future__ import annotations

import pytest

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
