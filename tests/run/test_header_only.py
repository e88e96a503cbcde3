"""A branch holding only its header (an older version killed between creating the branch and
appending ``thread_started``) is a thread not started yet: the next run with an agent starts
it, and a worker passes it by quietly instead of failing on it at every poll.

New threads can't get there any more: the branch and its ``thread_started`` are created in one
transaction (checked here by the store's contents right after creation).
"""

from __future__ import annotations

import pytest

from threads import Completed, Principal, agent
from threads.errors import LogError, NotFoundError
from threads.log.ids import uuid7
from threads.log.lines import Draft, first_event, make_header
from threads.run.worker import Worker
from threads.store.protocol import Store
from threads.testing.scripted import say, scripted_model

ALICE = Principal("api", "acme", "alice")


async def _header_only(store: Store) -> str:
    now = store.clock.now_ms()
    header = make_header(uuid7(now), uuid7(now), now)
    await store.create_branch(header, tenant_id=ALICE.tenant)  # what an older version left
    return header.thread_id


async def test_a_header_only_thread_is_started_by_its_next_run(store: Store) -> None:
    thread_id = await _header_only(store)
    bot = agent(name="t", model=scripted_model([say("hello")]))
    result = await bot.run("hi", thread=thread_id, store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    assert result.output == "hello"
    timeline = await result.thread.timeline()
    assert [e.type for e in timeline][:2] == ["thread_started", "user_input"]
    assert [e.type for e in timeline].count("thread_started") == 1


async def test_a_worker_passes_a_header_only_thread_by_quietly(store: Store) -> None:
    await _header_only(store)
    lines: list[str] = []
    bot = agent(name="t", model=scripted_model([]))
    worker = Worker(store, [bot], poll_ms=10, log=lines.append)
    for _ in range(3):
        await worker.run_once()
    assert worker.stats.runs == 0
    assert not any("None" in line for line in lines), lines


async def test_a_new_thread_is_created_with_its_thread_started(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("hello")]))
    result = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    root = await store.root_branch(result.thread.id)
    _, lines = await store.stored_lines(root.branch_id)
    assert b'"type":"thread_started"' in lines[1]
    assert b'"epoch":1,' in lines[1]


async def test_a_refused_first_event_creates_no_branch(store: Store) -> None:
    """Creation is one transaction: when the first event is refused, no header is left."""
    now = store.clock.now_ms()
    header = make_header(uuid7(now), uuid7(now), now)
    broken = first_event(
        header, Draft("thread_started", {"agent_name": "no config"}, {"kind": "host"})
    )
    with pytest.raises(LogError):
        await store.create_branch(header, tenant_id=ALICE.tenant, events=[broken])
    with pytest.raises(NotFoundError):
        await store.get_branch(header.branch_id)
