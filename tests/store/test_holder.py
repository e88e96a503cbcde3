"""Lease holders: who holds a branch, and a dead holder on this host taken over at once.

Real processes play the holders: a child that exited (its pid gone), a zombie (exited, not yet
reaped), a live child (its pid, but another start time: a reused pid), a live child that *is*
the holder. Every engine runs these through the ``store`` fixture; the lease clock never moves,
so each takeover below happens while the dead holder's lease is still live by the clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from threads.clock import FakeClock
from threads.errors import ConfigError, StoreError
from threads.run.holders import gone_holders
from threads.store import holder as holders
from threads.store.holder import Holder, Host, process_start_ticks, this_host
from threads.store.lease_wait import acquire_waiting
from threads.store.protocol import Store
from threads.testing.sample_log import SampleLog

TENANT = "acme"
TTL = 30_000


async def new_branch(store: Store, clock: FakeClock) -> str:
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id=TENANT)
    return log.header.branch_id


@pytest.fixture
def live_child() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    yield child
    assert child.stdin is not None
    child.stdin.close()
    child.wait(timeout=30)


def holder_of(pid: int, start: int | None, host: Host | None = None) -> str:
    return Holder("dead-run", host or this_host(), pid, start).encode()


def exited_pid() -> tuple[int, int]:
    """The pid and start time of a process that ran and was reaped."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    start = process_start_ticks(child.pid)
    assert start is not None
    assert child.stdin is not None
    child.stdin.close()
    child.wait(timeout=30)
    return child.pid, start


def zombie() -> tuple[subprocess.Popen[bytes], str]:
    """A child that exited and was not reaped yet, and its holder id from while it ran."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    holder = holder_of(child.pid, process_start_ticks(child.pid))
    assert child.stdin is not None
    child.stdin.close()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, left unreaped
    stat = holders._stat(child.pid)
    assert stat is not None
    assert stat[0] == "Z"
    return child, holder


def test_this_process_is_recorded_with_host_pid_and_start_time() -> None:
    recorded = holders.parse(holders.holder_id("run-1"))
    assert recorded.run == "run-1"
    assert recorded.host == this_host()
    assert recorded.host.boot_id  # Linux: /proc/sys/kernel/random/boot_id
    assert recorded.pid is not None
    assert recorded.start_ticks == process_start_ticks(recorded.pid)
    assert not holders.provably_gone(recorded)
    assert holders.holder_id(holders.holder_id("run-1")) == holders.holder_id("run-1")


def test_an_id_we_did_not_write_is_never_judged_gone() -> None:
    for raw in ("runner-1", "{}", '{"format":"threads.holder/1"}', "[1]"):
        assert not holders.provably_gone(holders.parse(raw))
    assert holders.parse("runner-1").describe() == "holder 'runner-1'"


async def test_an_exited_holder_on_this_host_is_taken_over_at_once(
    store: Store, clock: FakeClock
) -> None:
    branch = await new_branch(store, clock)
    pid, start = exited_pid()
    dead = await store.acquire_lease(branch, holder_of(pid, start), TTL)
    assert [b.branch_id for b in await store.list_free_threads()] == [branch]
    taken = await store.acquire_lease(branch, "new-run", TTL)  # the clock did not move
    assert taken.epoch == dead.epoch + 1
    assert holders.parse(taken.holder_id).run == "new-run"
    with pytest.raises(StoreError) as stale:
        await store.check_lease(dead)
    assert stale.value.code == "stale_epoch"


async def test_a_zombie_holder_is_gone(store: Store, clock: FakeClock) -> None:
    branch = await new_branch(store, clock)
    child, holder = zombie()
    try:
        dead = await store.acquire_lease(branch, holder, TTL)
        assert (await store.acquire_lease(branch, "new-run", TTL)).epoch == dead.epoch + 1
    finally:
        child.wait(timeout=30)


async def test_a_reused_pid_is_not_the_holder(
    store: Store, clock: FakeClock, live_child: subprocess.Popen[bytes]
) -> None:
    branch = await new_branch(store, clock)
    start = process_start_ticks(live_child.pid)
    assert start is not None
    await store.acquire_lease(branch, holder_of(live_child.pid, start - 1), TTL)
    await store.acquire_lease(branch, "new-run", TTL)


async def test_a_live_holder_is_busy_and_named(
    store: Store, clock: FakeClock, live_child: subprocess.Popen[bytes]
) -> None:
    branch = await new_branch(store, clock)
    held = await store.acquire_lease(
        branch, holder_of(live_child.pid, process_start_ticks(live_child.pid)), TTL
    )
    clock.advance(6_600)
    with pytest.raises(StoreError) as busy:
        await store.acquire_lease(branch, "new-run", TTL)
    assert busy.value.code == "branch_busy"
    assert f"pid {live_child.pid} on host {this_host().hostname}" in busy.value.message
    assert "expires in 23.4 s" in busy.value.message
    assert await store.list_free_threads() == []
    state = await store.read_lease(branch)
    assert state is not None
    assert (state.holder_id, state.epoch, state.expires_at) == (
        held.holder_id, held.epoch, held.expires_at,
    )
    assert state.live
    assert state.expires_at - state.now == 23_400


@pytest.mark.parametrize(
    "elsewhere",
    [
        {"boot_id": "00000000-0000-0000-0000-000000000000"},  # another machine (or a reboot)
        {"hostname": "another-host"},
        {"pid_namespace": "pid:[1]"},  # another container on this machine: its pids aren't ours
        {"boot_id": None},  # a system without /proc
    ],
)
async def test_a_holder_elsewhere_waits_for_its_lease(
    store: Store, clock: FakeClock, elsewhere: dict[str, str | None]
) -> None:
    branch = await new_branch(store, clock)
    pid, start = exited_pid()
    host = dataclasses.replace(this_host(), **elsewhere)  # type: ignore[arg-type]
    await store.acquire_lease(branch, holder_of(pid, start, host), TTL)
    with pytest.raises(StoreError) as busy:
        await store.acquire_lease(branch, "new-run", TTL)
    assert busy.value.code == "branch_busy"
    assert f"pid {pid} on host {host.hostname}" in busy.value.message
    clock.advance(TTL)
    await store.acquire_lease(branch, "new-run", TTL)


async def test_waiting_takes_the_lease_when_the_clock_passes_its_expiry(
    store: Store, clock: FakeClock, live_child: subprocess.Popen[bytes]
) -> None:
    branch = await new_branch(store, clock)
    live = holder_of(live_child.pid, process_start_ticks(live_child.pid))
    held = await store.acquire_lease(branch, live, TTL)
    waiter = asyncio.create_task(acquire_waiting(store, branch, "waiter", TTL, wait=True))
    await asyncio.sleep(0.1)
    assert not waiter.done()
    clock.advance(TTL)
    taken = await asyncio.wait_for(waiter, 10)
    assert taken.epoch == held.epoch + 1


async def test_waiting_takes_the_lease_once_the_holder_releases(
    store: Store, clock: FakeClock
) -> None:
    branch = await new_branch(store, clock)
    held = await store.acquire_lease(branch, "holder", TTL)
    waiter = asyncio.create_task(acquire_waiting(store, branch, "waiter", TTL, wait=60))
    await asyncio.sleep(0.1)
    assert not waiter.done()
    await store.release_lease(held)
    assert (await asyncio.wait_for(waiter, 10)).epoch == held.epoch + 1


async def test_a_wait_ends_busy_at_its_deadline(store: Store, clock: FakeClock) -> None:
    branch = await new_branch(store, clock)
    await store.acquire_lease(branch, "holder", TTL)
    waiter = asyncio.create_task(acquire_waiting(store, branch, "waiter", TTL, wait=5))
    await asyncio.sleep(0.1)
    clock.advance(5_000)  # the wait is over by the store's clock; the lease is not
    with pytest.raises(StoreError) as busy:
        await asyncio.wait_for(waiter, 10)
    assert busy.value.code == "branch_busy"


@pytest.mark.parametrize("wait", [-1, "yes", None])
async def test_a_bad_wait_is_a_config_error(store: Store, clock: FakeClock, wait: object) -> None:
    branch = await new_branch(store, clock)
    with pytest.raises(ConfigError):
        await acquire_waiting(store, branch, "w", TTL, wait=wait)  # type: ignore[arg-type]


async def test_a_holder_proven_gone_stays_proven_through_later_holders(
    store: Store, clock: FakeClock
) -> None:
    """The lease row is overwritten by each acquire; the proof is carried in the next holder's
    id, so a person reading the branch long after the takeover still has it."""
    branch = await new_branch(store, clock)
    pid, start = exited_pid()
    dead = await store.acquire_lease(branch, holder_of(pid, start), TTL)
    assert await gone_holders(store, branch) == {dead.epoch}  # the row's own holder: gone
    taker = await store.acquire_lease(branch, "taker", TTL)
    assert holders.parse(taker.holder_id).gone == (dead.epoch,)
    await store.release_lease(taker)  # released, not gone: it is not proven dead
    later = await store.acquire_lease(branch, "later", TTL)
    assert holders.parse(later.holder_id).gone == (dead.epoch,)
    assert await gone_holders(store, branch) == {dead.epoch}


async def test_nothing_is_proven_about_a_live_or_unprovable_holder(
    store: Store, clock: FakeClock, live_child: subprocess.Popen[bytes]
) -> None:
    branch = await new_branch(store, clock)
    alive = await store.acquire_lease(
        branch, holder_of(live_child.pid, process_start_ticks(live_child.pid)), TTL
    )
    assert await gone_holders(store, branch) == frozenset()
    clock.advance(TTL)  # expired: taken over, but nothing is proven about the live child
    taker = await store.acquire_lease(branch, "taker", TTL)
    assert holders.parse(taker.holder_id).gone == ()
    pid, start = exited_pid()
    elsewhere = dataclasses.replace(this_host(), hostname="another-host")
    await store.release_lease(taker)
    await store.acquire_lease(branch, holder_of(pid, start, elsewhere), TTL)
    clock.advance(TTL)
    last = await store.acquire_lease(branch, "last", TTL)
    assert holders.parse(last.holder_id).gone == ()
    assert alive.epoch not in await gone_holders(store, branch)


def test_a_holder_id_carries_a_bounded_number_of_proofs() -> None:
    pid, start = exited_pid()
    previous = Holder("dead", this_host(), pid, start, tuple(range(1, 40))).encode()
    carried = holders.parse(holders.succeeding(holders.holder_id("next"), previous, 40)).gone
    assert carried == tuple(range(41 - holders.KEPT_GONE, 41))  # the newest, this one too
    assert holders.succeeding("not-ours", previous, 40) == "not-ours"
