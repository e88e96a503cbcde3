"""Memory: adapters whose traffic can't pass the fence are refused at setup; local_memory()
keeps records in the store, scoped to tenant, agent and user, fenced and idempotent by key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from postgres_support import POSTGRES_MARKS, drop_store, open_postgres
from threads import ConfigError, agent
from threads.errors import StoreError
from threads.memory import BoundMemory, MemoryScope, local_memory, mem0
from threads.memory.records import record_id
from threads.run.principal import Principal
from threads.store.sqlite import sqlite
from threads.testing.scripted import say, scripted_model

ENGINES = [pytest.param("sqlite"), pytest.param("postgres", marks=POSTGRES_MARKS)]


def test_mem0_is_refused_at_setup() -> None:
    with pytest.raises(ConfigError) as refused:
        mem0(api_key="m0-secret")
    assert refused.value.code == "transport_fence_unsupported"
    assert "m0-secret" not in str(refused.value)


def test_a_memory_adapter_that_does_not_declare_the_fence_is_refused() -> None:
    class Unfenced:
        pass

    with pytest.raises(ConfigError) as refused:
        agent(name="t", model=scripted_model([say("hi")]), memory=Unfenced())
    assert refused.value.code == "transport_fence_unsupported"


# ---- local_memory(): kept in the store (SQLite, Postgres), scoped, fenced, idempotent by key --

ALICE = MemoryScope.of(Principal("api", "acme", "alice"), "support")
BOB = MemoryScope.of(Principal("api", "acme", "bob"), "support")
OTHER_TENANT = MemoryScope.of(Principal("api", "globex", "alice"), "support")
OTHER_AGENT = MemoryScope.of(Principal("api", "acme", "alice"), "sales")


async def _open() -> None:
    return None


@pytest.fixture(params=ENGINES)
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BoundMemory]:
    store = sqlite(tmp_path / "store") if request.param == "sqlite" else open_postgres(None)
    yield local_memory().bind(store)
    await store.close()
    await drop_store(store)


async def test_the_same_key_saves_once(memory: BoundMemory) -> None:
    first = await memory.remember(ALICE, "Tea, not coffee.", "b:call_1", _open)
    again = await memory.remember(ALICE, "Tea, not coffee.", "b:call_1", _open)
    assert first == again
    assert first.id == record_id("b:call_1")
    with pytest.raises(StoreError) as err:
        await memory.remember(ALICE, "Coffee after all.", "b:call_1", _open)
    assert err.value.code == "invalid_argument"
    assert [h.text for h in await memory.recall(ALICE, "tea coffee", _open)] == [
        "Tea, not coffee."
    ]


async def test_a_scope_sees_and_forgets_only_its_own(memory: BoundMemory) -> None:
    mine = await memory.remember(ALICE, "Alice drinks tea", "b:1", _open)
    await memory.remember(BOB, "Bob drinks tea too", "b:2", _open)
    assert [h.text for h in await memory.recall(ALICE, "tea", _open)] == ["Alice drinks tea"]
    assert [h.text for h in await memory.recall(BOB, "tea", _open)] == ["Bob drinks tea too"]
    assert await memory.recall(OTHER_TENANT, "tea", _open) == []
    assert await memory.recall(OTHER_AGENT, "tea", _open) == []
    assert await memory.forget(BOB, mine.id, "b:3", _open) is False  # not Bob's to forget
    assert len(await memory.recall(ALICE, "tea", _open)) == 1
    assert await memory.forget(ALICE, mine.id, "b:4", _open) is True
    assert await memory.forget(ALICE, mine.id, "b:4", _open) is False  # twice is a no-op
    assert await memory.recall(ALICE, "tea", _open) == []


async def test_query_text_is_never_search_syntax(memory: BoundMemory) -> None:
    await memory.remember(ALICE, 'He said "NEAR" AND then OR not', "b:1", _open)
    for query in ['"', "AND", "NEAR(", "*", "a OR", "-x", "col:val", ""]:
        await memory.recall(ALICE, query, _open)  # none of these raises
    assert len(await memory.recall(ALICE, 'said "NEAR"', _open)) == 1


async def test_a_refused_fence_reads_and_writes_nothing(memory: BoundMemory) -> None:
    async def lost() -> None:
        raise StoreError("stale_epoch", "lease lost")

    with pytest.raises(StoreError):
        await memory.remember(ALICE, "never saved", "b:1", lost)
    with pytest.raises(StoreError):
        await memory.recall(ALICE, "saved", lost)
    assert await memory.recall(ALICE, "saved", _open) == []


def test_local_memory_needs_a_store_that_keeps_it() -> None:
    with pytest.raises(ConfigError) as err:
        local_memory().bind(object())
    assert err.value.code == "invalid_config"
