"""``run(..., wait=...)``: a run that finds its thread held waits for the lease instead of
failing ``branch_busy``; without ``wait`` the refusal names the holder and its expiry. The
holder here is another lease in this process (alive by definition), the clock a FakeClock."""

from __future__ import annotations

import asyncio

import pytest

from threads import Agent, Completed, ConfigError, Failed, Principal, agent
from threads.store.holder import this_host
from threads.store.protocol import Store
from threads.testing.scripted import say, scripted_model

ALICE = Principal("api", "acme", "alice")
TTL = 30_000


async def held_thread(store: Store) -> tuple[Agent, str, str]:
    """The agent, and a thread it ran once: (agent, thread id, branch id)."""
    bot = agent(name="t", model=scripted_model([say("one"), say("two")]))
    first = await bot.run("hi", store=store, principal=ALICE)
    branch = await store.root_branch(first.thread.id)
    return bot, first.thread.id, branch.branch_id


async def test_busy_names_the_holder_and_its_expiry(store: Store) -> None:
    bot, thread, branch = await held_thread(store)
    await store.acquire_lease(branch, "someone-else", TTL)
    store.clock.advance(10_000)  # type: ignore[attr-defined]
    busy = await bot.run("again", store=store, thread=thread, principal=ALICE)
    assert isinstance(busy, Failed)
    assert busy.error.code == "branch_busy"
    assert f"on host {this_host().hostname}" in busy.error.message
    assert "expires in 20.0 s" in busy.error.message


async def test_wait_runs_once_the_holder_lets_go(store: Store) -> None:
    bot, thread, branch = await held_thread(store)
    held = await store.acquire_lease(branch, "someone-else", TTL)
    waiting = asyncio.create_task(
        bot.run("again", store=store, thread=thread, principal=ALICE, wait=True)
    )
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await store.release_lease(held)
    result = await asyncio.wait_for(waiting, 10)
    assert isinstance(result, Completed)
    assert result.output == "two"


async def test_a_wait_in_seconds_ends_busy_by_the_clock(store: Store) -> None:
    bot, thread, branch = await held_thread(store)
    await store.acquire_lease(branch, "someone-else", TTL)
    waiting = asyncio.create_task(
        bot.run("again", store=store, thread=thread, principal=ALICE, wait=2.5)
    )
    await asyncio.sleep(0.1)
    store.clock.advance(2_500)  # type: ignore[attr-defined]
    busy = await asyncio.wait_for(waiting, 10)
    assert isinstance(busy, Failed)
    assert busy.error.code == "branch_busy"


async def test_a_bad_wait_is_refused_before_anything_is_written(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("one")]))
    with pytest.raises(ConfigError):
        await bot.run("hi", store=store, wait=-1)
    assert await store.list_threads() == []
