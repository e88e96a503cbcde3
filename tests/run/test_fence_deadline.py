"""The fence without a store round trip per send: a holder trusts its lease locally until the
time its acquire/renew request was sent + TTL - margin (on its monotonic clock, and while the
store's clock is short of the expiry by the margin); past that it renews at the store before
anything is sent, and refuses when the lease is gone. Time is injected, never slept."""

from __future__ import annotations

import pytest

from threads import FakeClock, StoreError, agent
from threads.run.writer import BranchWriter, fence_time
from threads.store.protocol import Lease, Store
from threads.testing.scripted import say, scripted_model

TTL_MS = 30_000
MARGIN_MS = TTL_MS // 5


class SteppingClock(FakeClock):
    """A wall clock that can jump while the monotonic clock beside it does not."""

    def __init__(self) -> None:
        super().__init__()
        self.monotonic = 0

    def monotonic_ms(self) -> int:
        return self.monotonic


@pytest.fixture
def clock() -> SteppingClock:
    return SteppingClock()


class Trips:
    """Counts the lease requests a writer sends to the store."""

    def __init__(self, store: Store) -> None:
        self.count = 0
        renew, check = store.renew_lease, store.check_lease

        async def counted_renew(lease: Lease, ttl_ms: int) -> Lease:
            self.count += 1
            return await renew(lease, ttl_ms)

        async def counted_check(lease: Lease) -> None:
            self.count += 1
            await check(lease)

        store.renew_lease = counted_renew  # type: ignore[method-assign]
        store.check_lease = counted_check  # type: ignore[method-assign]


async def holding_writer(store: Store) -> BranchWriter:
    bot = agent(name="t", model=scripted_model([say("hi")]))
    done = await bot.run("hello", store=store)
    branch = await store.root_branch(done.thread.id)
    sent_at = fence_time(store)
    lease = await store.acquire_lease(branch.branch_id, "holder", TTL_MS)
    chain = await store.read_chain(branch.branch_id)
    return BranchWriter(
        store, lease, chain.fold(store.clock.now_ms()), ttl_ms=TTL_MS, lease_sent_at=sent_at
    )


def advance(clock: SteppingClock, ms: int) -> None:
    clock.advance(ms)
    clock.monotonic += ms


async def test_checks_inside_the_deadline_never_ask_the_store(
    store: Store, clock: SteppingClock
) -> None:
    writer = await holding_writer(store)
    trips = Trips(store)
    for _ in range(100):
        await writer.check()
    advance(clock, TTL_MS - MARGIN_MS - 1)
    await writer.check()
    assert trips.count == 0


async def test_a_check_past_the_local_deadline_renews_first(
    store: Store, clock: SteppingClock
) -> None:
    writer = await holding_writer(store)
    trips = Trips(store)
    advance(clock, TTL_MS - MARGIN_MS)  # the store still holds it live: the renewal succeeds
    await writer.check()
    assert trips.count == 1
    assert writer.lease.expires_at == clock.now_ms() + TTL_MS
    await writer.check()  # trusted again from the renewal's send time
    assert trips.count == 1


async def test_a_send_after_a_takeover_is_refused(
    store: Store, clock: SteppingClock
) -> None:
    writer = await holding_writer(store)
    advance(clock, TTL_MS + 1)  # frozen past its lease: a second runner takes the thread
    await store.acquire_lease(writer.branch_id, "second-runner", TTL_MS)
    trips = Trips(store)
    with pytest.raises(StoreError) as refused:
        await writer.check()
    assert refused.value.code == "stale_epoch"
    assert trips.count == 1  # it asked the store instead of trusting an old deadline
    with pytest.raises(StoreError):
        await writer.check()  # lost for good, without asking again
    assert trips.count == 1


async def test_a_wall_clock_jump_past_expiry_is_noticed(
    store: Store, clock: SteppingClock
) -> None:
    """The store judges expiry on the wall clock; a jump ahead expires the lease there while
    the holder's monotonic clock barely moved: the fence must not trust its local deadline."""
    writer = await holding_writer(store)
    clock.advance(TTL_MS + 1)  # the wall clock only
    await store.acquire_lease(writer.branch_id, "second-runner", TTL_MS)
    with pytest.raises(StoreError) as refused:
        await writer.check()
    assert refused.value.code == "stale_epoch"


async def test_monotonic_time_alone_ends_the_trust(
    store: Store, clock: SteppingClock
) -> None:
    """A wall clock that stepped back makes the lease look young; monotonic time still ends
    the local trust at the deadline."""
    writer = await holding_writer(store)
    trips = Trips(store)
    clock.monotonic += TTL_MS - MARGIN_MS
    await writer.check()
    assert trips.count == 1


async def test_without_a_send_time_the_first_check_asks_the_store(
    store: Store,
) -> None:
    writer = await holding_writer(store)
    unknown = BranchWriter(store, writer.lease, writer.fold, ttl_ms=TTL_MS)
    trips = Trips(store)
    await unknown.check()
    await unknown.check()
    assert trips.count == 1
