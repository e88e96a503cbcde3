"""Bounded, recorded settlement: every resend of an effect threads decides on its own is counted
against the tool's ``max_attempts``, waits a recorded ``retry_scheduled`` (on the store's clock,
so these tests never sleep), and the call parks when the bound is reached. Dispatch and settle
never call each other, so no call stack grows with attempts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from test_written_logs import assert_export_is_valid

from threads import (
    Completed,
    FakeClock,
    NotFound,
    Parked,
    Principal,
    Reconcile,
    agent,
    open_thread,
    sqlite,
    tool,
)
from threads.log.lines import Event
from threads.store.protocol import Store
from threads.testing.scripted import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")


class Note(BaseModel):
    text: str


def of_type(events: list[Event], type_: str) -> list[Event]:
    return [e for e in events if e.type == type_]


def always_times_out(sent: list[tuple[str, int]], **options: Any) -> Any:
    async def send(args: Note, ctx: Any) -> str:
        sent.append((ctx.effect_key, ctx.attempt))
        raise TimeoutError("the provider did not answer")

    return tool(name="send", description="Send.", input=Note, execute=send, **options)


async def test_an_always_timing_out_idempotent_tool_parks_after_its_bound(
    store: Store,
) -> None:
    sent: list[tuple[str, int]] = []
    send = always_times_out(
        sent, effect="idempotent", dedup_window_ms=24 * 3600 * 1000, max_attempts=4
    )
    bot = agent(name="t", model=scripted_model([use(call("send", "c1", text="hi"))]), tools=[send])
    clock = store.clock
    assert isinstance(clock, FakeClock)
    started = clock.now_ms()
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, Parked)
    assert result.reason == "effect_unknown"
    assert [p.kind for p in result.pending] == ["effect"]
    detail = result.pending[0].detail
    assert detail is not None
    assert "outcome unknown (timeout) after 4 dispatch(es), all the tool allows (4)" in detail
    assert [attempt for _, attempt in sent] == [1, 2, 3, 4]
    assert len({key for key, _ in sent}) == 1  # one effect key for every attempt
    events = await result.thread.timeline()
    begins = of_type(events, "effect_begin")
    assert [e.data["attempt"] for e in begins] == [1, 2, 3, 4]
    assert len(of_type(events, "effect_unknown")) == 4
    retries = of_type(events, "retry_scheduled")
    assert [r.data["delay_ms"] for r in retries] == [1000, 2000, 4000]
    for retry, begin, next_begin in zip(retries, begins, begins[1:], strict=False):
        assert retry.data["request_event_id"] == begin.event_id  # names the attempt it follows
        assert retry.data["basis"] == "backoff"
        assert next_begin.time >= retry.data["not_before"]  # the wait was honoured
    assert clock.now_ms() - started >= 7000  # waited on the fake clock, not in real time
    assert of_type(events, "parked")[-1].data["reason"] == "effect_unknown"
    await assert_export_is_valid(result.thread)
    # a further run does not send again
    again = await bot.run(None, store=store, thread=result.thread.id, principal=ALICE)
    assert isinstance(again, Parked)
    assert len(sent) == 4


async def test_a_huge_bound_runs_in_a_flat_loop_without_recursion(store: Store) -> None:
    sent: list[tuple[str, int]] = []
    send = always_times_out(
        sent,
        effect="idempotent",
        dedup_window_ms=10**12,
        max_attempts=400,  # the old recursive settle died at ~325
        retry_backoff_ms=0,
    )
    bot = agent(name="t", model=scripted_model([use(call("send", "c1", text="hi"))]), tools=[send])
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, Parked)
    assert len(sent) == 400
    assert not of_type(await result.thread.timeline(), "retry_scheduled")  # no wait, no record


async def test_the_idempotent_resend_stays_inside_the_dedup_window(store: Store) -> None:
    sent: list[tuple[str, int]] = []
    # 1 s + 2 s of backoff (plus the provider skew margin) do not fit in a 3.5 s window
    send = always_times_out(sent, effect="idempotent", dedup_window_ms=3500, max_attempts=10)
    bot = agent(name="t", model=scripted_model([use(call("send", "c1", text="hi"))]), tools=[send])
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, Parked)
    assert [attempt for _, attempt in sent] == [1, 2]


async def test_a_reconcilable_tool_whose_lookup_never_finds_is_bounded(store: Store) -> None:
    sent: list[tuple[str, int]] = []

    async def lookup(key: str, ctx: Any) -> NotFound:
        return NotFound()

    send = always_times_out(
        sent,
        effect="reconcilable",
        reconcile=Reconcile(lookup, finality="final"),
        max_attempts=3,
    )
    bot = agent(name="t", model=scripted_model([use(call("send", "c1", text="hi"))]), tools=[send])
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, Parked)
    assert [attempt for _, attempt in sent] == [1, 2, 3]
    assert len(of_type(await result.thread.timeline(), "retry_scheduled")) == 2


class StallingClock(FakeClock):
    """A fake clock whose waits never end: the run is stopped in the middle of a backoff."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = asyncio.Event()

    async def sleep_ms(self, ms: int) -> None:
        self.waiting.set()
        await asyncio.Event().wait()


class RecordingClock(FakeClock):
    def __init__(self, now_ms: int) -> None:
        super().__init__(now_ms)
        self.slept: list[int] = []

    async def sleep_ms(self, ms: int) -> None:
        self.slept.append(ms)
        await super().sleep_ms(ms)


def timing_out_once(attempts: list[int], dedup_window_ms: int = 3_600_000) -> Any:
    """An idempotent tool whose first send times out (5 s backoff) and whose resend works."""

    async def send(args: Note, ctx: Any) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise TimeoutError("no answer")
        return "sent"

    send_tool = tool(
        name="send",
        description="Send.",
        input=Note,
        execute=send,
        effect="idempotent",
        dedup_window_ms=dedup_window_ms,
        retry_backoff_ms=5000,
    )
    script = [use(call("send", "c1", text="hi")), say("done")]
    return agent(name="t", model=scripted_model(script), tools=[send_tool])


async def died_in_a_backoff(store_dir: Path, attempts: list[int]) -> tuple[str, int]:
    """Run until the first resend's wait, then die there; the thread id and its not_before."""
    stalling = StallingClock()
    store = sqlite(store_dir, clock=stalling)
    try:
        task = asyncio.create_task(
            timing_out_once(attempts).run("go", store=store, principal=ALICE)
        )
        await stalling.waiting.wait()
        task.cancel()  # the process dies while it waits
        with pytest.raises(asyncio.CancelledError):
            await task
        [thread] = await store.list_threads()
        timeline = await (await open_thread(store, thread.thread_id)).timeline()
    finally:
        await store.close()
    [retry] = of_type(timeline, "retry_scheduled")
    return thread.thread_id, retry.data["not_before"]


@pytest.mark.parametrize("restart_ms_before_not_before", [3000, -60_000])
async def test_a_restart_waits_only_until_the_recorded_not_before(
    tmp_path: Path, restart_ms_before_not_before: int
) -> None:
    attempts: list[int] = []
    thread_id, not_before = await died_in_a_backoff(tmp_path / "store", attempts)
    # restarted 2 s into the 5 s wait it waits out the remaining 3 s; after it, not at all
    clock = RecordingClock(not_before - restart_ms_before_not_before)
    store = sqlite(tmp_path / "store", clock=clock)
    try:
        done = await timing_out_once(attempts).run(
            None, store=store, thread=thread_id, principal=ALICE
        )
        assert isinstance(done, Completed)
        assert sum(clock.slept) == max(restart_ms_before_not_before, 0)
        assert attempts == [1, 2]
        events = await done.thread.timeline()
        second = of_type(events, "effect_begin")[-1]
        assert second.data["attempt"] == 2
        assert second.time >= not_before
        assert len(of_type(events, "retry_scheduled")) == 1  # the recorded wait, not a new one
    finally:
        await store.close()


async def test_a_resend_after_a_crash_does_not_wait(store: Store) -> None:
    attempts: list[int] = []
    inside = asyncio.Event()

    async def send(args: Note, ctx: Any) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            inside.set()
            await asyncio.Event().wait()  # the process dies in here
        return "sent"

    def bot() -> Any:
        send_tool = tool(
            name="send",
            description="Send.",
            input=Note,
            execute=send,
            effect="idempotent",
            dedup_window_ms=3_600_000,
        )
        return agent(
            name="t",
            model=scripted_model([use(call("send", "c1", text="hi")), say("done")]),
            tools=[send_tool],
        )

    task = asyncio.create_task(bot().run("go", store=store, principal=ALICE))
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [thread] = await store.list_threads()
    done = await bot().run(None, store=store, thread=thread.thread_id, principal=ALICE)
    assert isinstance(done, Completed)
    assert attempts == [1, 2]
    assert not of_type(await done.thread.timeline(), "retry_scheduled")


def test_the_bound_and_backoff_are_checked_when_the_tool_is_defined() -> None:
    from threads import ConfigError

    async def send(args: Note, ctx: Any) -> str:
        return "ok"

    for bad in ({"max_attempts": 0}, {"max_attempts": True}, {"retry_backoff_ms": -1}):
        with pytest.raises(ConfigError) as refused:
            tool(name="send", description="Send.", input=Note, execute=send, **bad)
        assert refused.value.code == "invalid_config"


async def test_a_resend_recorded_before_a_long_outage_parks_once_the_window_passed(
    tmp_path: Path,
) -> None:
    """``safe_to_retry`` (by ``provider_dedup``) was recorded inside the window, then the
    process died; it restarts after the provider's window ended. The resend would be applied a
    second time, so the effect parks instead, and a further run parks again without a send."""
    attempts: list[int] = []
    thread_id, not_before = await died_in_a_backoff(tmp_path / "store", attempts)
    clock = RecordingClock(not_before + 3_600_000)  # an hour-long outage: the window is over
    store = sqlite(tmp_path / "store", clock=clock)
    try:
        for _ in range(2):
            result = await timing_out_once(attempts).run(
                None, store=store, thread=thread_id, principal=ALICE
            )
            assert isinstance(result, Parked)
            assert result.reason == "effect_unknown"
        assert attempts == [1]  # never resent
        [pending] = result.pending
        assert pending.detail is not None
        assert "deduplicates the key only until" in pending.detail
        events = await result.thread.timeline()
        assert len(of_type(events, "effect_begin")) == 1
        assert len(of_type(events, "parked")) == 1  # the second run appended no new park
        [resolved] = of_type(events, "effect_resolved")
        assert resolved.data["outcome"] == "safe_to_retry"
        await assert_export_is_valid(result.thread)
    finally:
        await store.close()


class SuspendingClock(FakeClock):
    """A fake clock whose first wait lasts far longer than asked (the machine was suspended)."""

    def __init__(self, oversleep_ms: int) -> None:
        super().__init__()
        self.oversleep_ms = oversleep_ms

    async def sleep_ms(self, ms: int) -> None:
        await super().sleep_ms(ms + self.oversleep_ms)
        self.oversleep_ms = 0


async def test_a_backoff_wait_that_overruns_the_window_parks_instead_of_resending(
    tmp_path: Path,
) -> None:
    attempts: list[int] = []
    # the 5 s backoff fits the 10 s window, but the wait ends 8 s late (the lease still holds)
    store = sqlite(tmp_path / "store", clock=SuspendingClock(oversleep_ms=8000))
    try:
        bot = timing_out_once(attempts, dedup_window_ms=10_000)
        result = await bot.run("go", store=store, principal=ALICE)
        assert isinstance(result, Parked)
        assert attempts == [1]
        events = await result.thread.timeline()
        assert of_type(events, "retry_scheduled")  # the resend was allowed, then ran out of time
        assert of_type(events, "parked")[-1].data["address"]["kind"] == "effect"
    finally:
        await store.close()
