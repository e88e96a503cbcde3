"""A run hands its lease back however it ends: after a run that failed ``store_full`` (its
release could not be written either: the store is still full), freeing space lets the next run
on the thread, in the same process, start at once: no ``branch_busy``, no waiting out the TTL
(the clock is injected and never moves). Another process still waits for the expiry: only this
process knows the run is over. Both engines."""

from __future__ import annotations

from typing import Any

import pytest

from threads import Completed, Principal, StoreError, agent
from threads.store import holder
from threads.store.faults import fault
from threads.store.protocol import Store
from threads.testing.scripted import say, scripted_model

ALICE = Principal("api", "acme", "alice")
TTL_MS = 30_000


class Disk:
    """A store's disk that fills after ``room`` appends: appends and lease releases then fail
    ``store_full`` (as SQLite and Postgres report ENOSPC) until ``free()``."""

    def __init__(self, store: Store, room: int) -> None:
        self.room = room
        self.full = False
        self.failed_releases = 0
        append, release = store.append, store.release_lease

        async def full_append(*args: Any, **kwargs: Any) -> Any:
            self.room -= 1
            self.full = self.full or self.room < 0
            if self.full:
                raise fault("store_full", "injected: no space left on device")
            return await append(*args, **kwargs)

        async def full_release(*args: Any, **kwargs: Any) -> Any:
            if self.full:
                self.failed_releases += 1
                raise fault("store_full", "injected: no space left on device")
            return await release(*args, **kwargs)

        store.append = full_append  # type: ignore[method-assign]
        store.release_lease = full_release  # type: ignore[method-assign]

    def free(self) -> None:
        self.full = False
        self.room = 1_000


async def test_a_run_that_failed_store_full_leaves_its_thread_free_in_this_process(
    store: Store,
) -> None:
    bot = agent(name="t", model=scripted_model([say("one"), say("two")]))
    first = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(first, Completed)
    disk = Disk(store, room=0)
    with pytest.raises(StoreError) as full:
        await bot.run("again", store=store, thread=first.thread.id, principal=ALICE)
    assert full.value.code == "store_full"
    assert disk.failed_releases == 1  # the release could not be written either
    branch = await store.root_branch(first.thread.id)
    state = await store.read_lease(branch.branch_id)
    assert state is not None
    assert state.live  # still recorded, as the store is full

    disk.free()
    again = await bot.run("again", store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(again, Completed), again  # at once: the clock never moved
    assert again.output == "two"


async def test_only_the_run_that_ended_is_gone(store: Store) -> None:
    """The proof is about the ended run alone: another run of this process holding a lease is
    alive (``branch_busy`` for a second run meanwhile), and so is a holder of another process."""
    bot = agent(name="t", model=scripted_model([say("one")]))
    first = await bot.run("hi", store=store, principal=ALICE)
    disk = Disk(store, room=0)
    with pytest.raises(StoreError):
        await bot.run("again", store=store, thread=first.thread.id, principal=ALICE)
    disk.free()
    branch = await store.root_branch(first.thread.id)
    state = await store.read_lease(branch.branch_id)
    assert state is not None
    ended = holder.parse(state.holder_id)
    assert holder.provably_gone(ended)
    assert not holder.provably_gone(holder.this_process("a-live-run"))
    init = holder.Holder("x", ended.host, 1, holder.process_start_ticks(1))  # another process
    holder.ended(init.encode())
    assert not holder.provably_gone(init)

    lease = await store.acquire_lease(branch.branch_id, "a-live-run", TTL_MS)
    with pytest.raises(StoreError) as busy:
        await store.acquire_lease(branch.branch_id, "another-run", TTL_MS)
    assert busy.value.code == "branch_busy"
    await store.release_lease(lease)
