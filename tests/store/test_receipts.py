"""Idempotency receipts: written in the transaction of their append, on every engine.

A taken key rolls back the whole append (no event, no head move), and a branch whose head is
not ``turn_completed`` is listed as unfinished until its turn closes.
"""

from __future__ import annotations

import pytest

from threads.clock import FakeClock
from threads.errors import StoreError
from threads.store.protocol import Store
from threads.store.receipts import START_RUN, RunReceipt, principal_key
from threads.testing.sample_log import SampleLog

TENANT = "acme"


def receipt(log: SampleLog, key: str, run_id: str) -> RunReceipt:
    return RunReceipt(
        TENANT, START_RUN, key, principal_key("api", TENANT, "alice"), "h" * 64,
        log.header.thread_id, log.header.branch_id, run_id, 1,
    )


def test_principal_key_escapes_each_part() -> None:
    assert principal_key("a/b", "t%", "s") == "a%2Fb/t%25/s"
    assert principal_key("a", "b/c", "d") != principal_key("a/b", "c", "d")


async def test_receipt_commits_with_its_append_and_a_taken_key_rolls_back(
    store: Store, clock: FakeClock
) -> None:
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id=TENANT)
    lease = await store.acquire_lease(log.header.branch_id, "h1", 30_000)
    log.epoch = lease.epoch
    started = log.started()
    turn = log.turn()
    first = [started, turn[0]]  # thread_started + user_input
    await store.append(
        log.header.branch_id, first, expected_seq=0, lease=lease,
        receipt=receipt(log, "k1", turn[0].event_id),
    )
    got = await store.get_receipt(TENANT, START_RUN, "k1")
    assert got is not None
    assert got.run_id == turn[0].event_id
    assert got.branch_id == log.header.branch_id
    assert await store.get_receipt("other", START_RUN, "k1") is None
    assert [r.idempotency_key for r in await store.unfinished_receipts()] == ["k1"]

    with pytest.raises(StoreError) as taken:
        await store.append(
            log.header.branch_id, [turn[1]], expected_seq=2, lease=lease,
            receipt=receipt(log, "k1", "another-run"),
        )
    assert taken.value.code == "idempotency_key_reused"
    branch = await store.get_branch(log.header.branch_id)
    assert branch.head_seq == 2  # nothing of the refused append was kept

    rest = turn[1:]
    await store.append(log.header.branch_id, rest, expected_seq=2, lease=lease)
    assert rest[-1].type == "turn_completed"
    assert await store.unfinished_receipts() == []


async def test_a_new_branch_commits_with_its_receipt_and_a_taken_key_leaves_no_branch(
    store: Store, clock: FakeClock
) -> None:
    first = SampleLog(clock)
    first.epoch = 1
    events = [first.started(), first.turn()[0]]
    await store.create_branch(
        first.header, tenant_id=TENANT, events=events,
        receipt=receipt(first, "k-new", events[1].event_id),
    )
    got = await store.get_receipt(TENANT, START_RUN, "k-new")
    assert got is not None
    assert got.branch_id == first.header.branch_id

    loser = SampleLog(clock)
    loser.epoch = 1
    lost = [loser.started(), loser.turn()[0]]
    with pytest.raises(StoreError) as taken:
        await store.create_branch(
            loser.header, tenant_id=TENANT, events=lost,
            receipt=receipt(loser, "k-new", lost[1].event_id),
        )
    assert taken.value.code == "idempotency_key_reused"
    assert [b.thread_id for b in await store.list_threads()] == [first.header.thread_id]
