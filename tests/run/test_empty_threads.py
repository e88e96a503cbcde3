"""A thread no input ever reached is not a thread a person must look at.

A new thread's ``thread_started`` and first ``user_input`` are one append (the branch's
creation), so no crash leaves a thread without its input. Threads left empty by an earlier
version (a kill between the two) are not listed: not by ``threads ls``, not by the host's
thread list or inbox (``Summaries.listed``); they still open by id. Both engines.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from threads import Completed, Principal, agent, sqlite
from threads.cli.main import main
from threads.host.summaries import Summaries
from threads.log.ids import uuid7
from threads.log.lines import first_event, make_header
from threads.log.vocabulary import draft
from threads.store.protocol import Store
from threads.testing.scripted import say, scripted_model

ALICE = Principal("api", "acme", "alice")


class Created:
    """Records what each ``create_branch`` wrote with the branch."""

    def __init__(self, store: Store) -> None:
        self.types: list[list[str]] = []
        create = store.create_branch

        async def recorded(header: Any, **kwargs: Any) -> Any:
            self.types.append([e.type for e in kwargs.get("events") or []])
            return await create(header, **kwargs)

        store.create_branch = recorded  # type: ignore[method-assign]


async def left_empty(store: Store, name: str = "t") -> str:
    """What a kill between the two appends left before: a thread with thread_started alone."""
    bot = agent(name=name, model=scripted_model([say("x")]))
    header = make_header(uuid7(store.clock.now_ms()), uuid7(store.clock.now_ms()),
                         store.clock.now_ms())
    started = first_event(header, draft("thread_started", bot.config(), {"kind": "host"}))
    await store.create_branch(header, tenant_id=ALICE.tenant, events=[started])
    return header.thread_id


async def test_a_new_thread_is_created_with_its_first_input(store: Store) -> None:
    created = Created(store)
    bot = agent(name="t", model=scripted_model([say("hello")]))
    result = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert created.types == [["thread_started", "user_input"]]
    timeline = await result.thread.timeline()
    assert [e.type for e in timeline[:2]] == ["thread_started", "user_input"]
    assert timeline[1].data == {"source": "api", "text": "hi"}
    assert timeline[1].actor == {"kind": "user", "principal": ALICE.to_wire()}


async def test_empty_threads_are_not_listed_by_the_host(store: Store) -> None:
    empty = await left_empty(store)
    bot = agent(name="t", model=scripted_model([say("hello")]))
    real = await bot.run("hi", store=store, principal=ALICE)
    listed = await Summaries().listed(store, ALICE.tenant)
    assert [row.root.thread_id for row in listed] == [real.thread.id]
    assert (await store.root_branch(empty)).empty  # still there, by id


async def test_threads_ls_leaves_empty_threads_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = sqlite(tmp_path / "store")
    try:
        empty = await left_empty(store)
        bot = agent(name="t", model=scripted_model([say("hello")]))
        real = await bot.run("hi", store=store, principal=ALICE)
    finally:
        await store.close()
    code = await asyncio.to_thread(
        main, ["ls", "--store", str(tmp_path / "store"), "--tenant", ALICE.tenant]
    )
    assert code == 0
    out, err = capsys.readouterr()
    assert real.thread.id in out
    assert empty not in out
    assert "1 thread(s) that never got an input" in err
