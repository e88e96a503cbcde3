"""The holder's side of queued cancels: a cancel queued while the run holds the thread becomes
its ``cancel_requested`` at the next step boundary (once); one queued for a turn that already
ended never cancels a later turn; a malformed item is consumed without effect, never fatal."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from postgres_support import POSTGRES_MARKS, drop_store, fetch_all, open_postgres
from threads import Cancelled, Completed, FakeClock, Principal, agent, sqlite, tool
from threads.store.capabilities import controls_of
from threads.store.postgres import PostgresStore
from threads.store.protocol import Store
from threads.testing.scripted import call, say, scripted_model, use

ENGINES = [pytest.param("sqlite"), pytest.param("postgres", marks=POSTGRES_MARKS)]

ALICE = Principal("api", "acme", "alice")
BOB = {"issuer": "api", "subject": "bob", "tenant": "acme"}


class Empty(BaseModel):
    pass


def bot(during: Callable[[Any], Any]) -> Any:
    async def step(args: Empty, ctx: Any) -> str:
        await during(ctx)
        return "stepped"

    script = [use(call("step")), say("done"), use(call("step")), say("done again")]
    return agent(name="t", model=scripted_model(script),
                 tools=[tool(name="step", description="s", input=Empty, execute=step,
                             effect="read_only")])


def inbox(store: Store) -> list[tuple[Any, ...]]:
    query = "SELECT item_key, consumed_seq FROM inbox"
    if isinstance(store, PostgresStore):
        return fetch_all(store.schema, query)
    assert store.root is not None
    conn = sqlite3.connect(store.root / "threads.db")
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


async def test_a_cancel_queued_mid_run_is_recorded_at_the_next_step(store: Store) -> None:
    async def queue(ctx: Any) -> None:  # another process, while this run holds the thread
        controls = controls_of(store)
        assert controls is not None
        await controls.queue_control(tenant_id="acme", thread_id=ctx.thread_id,
                                     principal=BOB, command="cancel")

    result = await bot(queue).run("go", store=store, principal=ALICE)
    assert isinstance(result, Cancelled), result
    events = await result.thread.timeline()
    (cancel,) = [e for e in events if e.type == "cancel_requested"]
    assert cancel.actor == {"kind": "user", "principal": BOB}
    assert [seq for _, seq in inbox(store)] == [cancel.seq]


async def test_a_stale_or_malformed_item_never_cancels(store: Store) -> None:
    async def nothing(ctx: Any) -> None:
        return None

    first = await bot(nothing).run("go", store=store, principal=ALICE)
    assert isinstance(first, Completed)
    controls = controls_of(store)
    assert controls is not None
    await controls.queue_control(tenant_id="acme", thread_id=first.thread.id, principal=BOB,
                                 command="cancel")  # the turn it was meant for is over
    store.clock.advance(1)  # type: ignore[attr-defined]

    async def malformed(ctx: Any) -> None:
        await controls.queue_control(tenant_id="acme", thread_id=ctx.thread_id,
                                     principal={**BOB, "extra": 1}, command="stop_when_idle")
        await controls.queue_control(tenant_id="acme", thread_id=ctx.thread_id,
                                     principal={"subject": 7}, command="cancel")

    again = await bot(malformed).run("again", store=store, principal=ALICE,
                                     thread=first.thread.id)
    assert isinstance(again, Completed), again
    events = await again.thread.timeline()
    assert not [e for e in events if e.type == "cancel_requested"]
    consumed = dict(inbox(store))
    assert sum(seq is not None for seq in consumed.values()) == 2  # stale + malformed cancel
    assert len(consumed) == 3  # stop_when_idle waits for a loop that applies it


async def test_a_cancel_queued_during_the_model_call_stops_an_effectful_call(
    store: Store,
) -> None:
    """The reply that calls an effectful tool is held until its first effect_begin; the look
    at the boundary before that must still see a cancel queued while the model answered."""
    sent: list[str] = []

    async def charge(args: Empty, ctx: Any) -> str:
        sent.append(ctx.effect_key)
        return "charged"

    inner = scripted_model([use(call("charge")), say("done")])

    class QueuesWhileAnswering:  # another process queues a cancel while the model answers
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        async def stream(self, request: Any, fence: Any) -> AsyncIterator[Any]:
            controls = controls_of(store)
            assert controls is not None
            await controls.queue_control(tenant_id="acme", thread_id=fence.thread_id,
                                         principal=BOB, command="cancel")
            async for item in inner.stream(request, fence):
                yield item

    bot = agent(name="t", model=QueuesWhileAnswering(),  # type: ignore[arg-type]
                tools=[tool(name="charge", description="c", input=Empty, execute=charge,
                            effect="idempotent", dedup_window_ms=60_000)])
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, Cancelled), result
    assert sent == []
    types = [e.type for e in await result.thread.timeline()]
    assert "effect_begin" not in types
    reply = types.index("model_response")
    assert types[reply : reply + 4] == [
        "model_response", "tool_call", "permission_decision", "cancel_requested",
    ]


@pytest.fixture(params=ENGINES)
async def two_views(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Store, Store]]:
    """A store and a second store object on the same data: another process's view, whose
    queueing nothing in the first one hears of."""
    if request.param == "sqlite":
        store: Store = sqlite(tmp_path / "store", clock=FakeClock())
        other: Store = sqlite(tmp_path / "store", clock=store.clock)
    else:
        store = open_postgres(FakeClock())
        assert isinstance(store, PostgresStore)
        other = open_postgres(store.clock, store.schema)
    yield store, other
    await other.close()
    await store.close()
    await drop_store(store)


async def test_a_cancel_another_process_queues_during_a_tool_call_stops_the_next_request(
    two_views: tuple[Store, Store],
) -> None:
    """No look at the inbox is made between the tool's return and the next model_request; the
    request's own commit reads it, so the request is abandoned unsent, never sent."""
    store, other = two_views
    sent: list[int] = []
    inner = scripted_model([use(call("step")), say("done")])

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        async def stream(self, request: Any, fence: Any) -> AsyncIterator[Any]:
            sent.append(request.attempt)
            async for item in inner.stream(request, fence):
                yield item

    async def queue_elsewhere(args: Empty, ctx: Any) -> str:
        controls = controls_of(other)
        assert controls is not None
        await controls.queue_control(tenant_id="acme", thread_id=ctx.thread_id,
                                     principal=BOB, command="cancel")
        return "stepped"

    bot = agent(name="t", model=Counting(),  # type: ignore[arg-type]
                tools=[tool(name="step", description="s", input=Empty, execute=queue_elsewhere,
                            effect="read_only")])
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, Cancelled), result
    assert sent == [1]  # the request after the tool's result never left
    events = await result.thread.timeline()
    types = [e.type for e in events]
    result_at = types.index("tool_result")
    assert types[result_at:] == [
        "tool_result", "model_request", "model_attempt_abandoned", "cancel_requested",
        "cancelled", "turn_completed",
    ]
    abandoned = events[result_at + 2]
    assert abandoned.data == {
        "billing": "not_billed", "provider_outcome": "not_sent", "reason": "cancelled",
        "request_event_id": events[result_at + 1].event_id,
    }
    cancel = events[result_at + 3]
    assert cancel.actor == {"kind": "user", "principal": BOB}
    controls = controls_of(store)
    assert controls is not None
    assert await controls.pending_controls(result.thread.id) == []  # consumed with the cancel
