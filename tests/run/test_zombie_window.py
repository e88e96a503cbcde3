"""The zombie window, the loop side: tools send through ``ctx.http`` (fenced by the run's lease)
and see ``ctx.epoch``; a ``final`` not-found about a call an earlier holder began is trusted only
once no earlier holder can still be sending (takeover + ``settle_ms``), else the call parks and
says why; an operator's ``assume_not_done`` is refused in that window; and a run that ends on an
error hands its lease back at once. Time is a fake clock; the "frozen" holder is a task parked
inside its tool."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from test_written_logs import assert_export_is_valid

from threads import (
    Completed,
    ControlError,
    Failed,
    FakeClock,
    Found,
    NotFound,
    Parked,
    Principal,
    Reconcile,
    StoreError,
    Thread,
    agent,
    sqlite,
    tool,
)
from threads.cli.main import main as cli_main
from threads.models.protocol import ModelCallError
from threads.run.agent import Agent
from threads.run.worker import Worker
from threads.store import holder
from threads.store.protocol import Store
from threads.testing.scripted import Fail, call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")
TTL_MS = 30_000
SETTLE_MS = 60_000


class Mail(BaseModel):
    to: str


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def serve_http(hits: list[str]) -> tuple[asyncio.Server, str]:
    """A loopback HTTP server that counts requests and answers 200."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line = await reader.readline()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        hits.append(request_line.decode().split(" ")[1])
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def steal_lease(store: Store, clock: FakeClock, thread_id: str) -> None:
    """What a second runner does after the first froze past its lease: take the thread."""
    clock.advance(TTL_MS + 1)
    branch = await store.root_branch(thread_id)
    await store.acquire_lease(branch.branch_id, "second-runner", TTL_MS)


async def test_ctx_http_checks_the_lease_before_every_request(
    store: Store, clock: FakeClock
) -> None:
    hits: list[str] = []
    server, base = await serve_http(hits)
    first_sent, go_on = asyncio.Event(), asyncio.Event()
    epochs: list[int] = []

    async def send(args: Mail, ctx: Any) -> str:
        epochs.append(ctx.epoch)
        await ctx.http.post(f"{base}/send/1")
        first_sent.set()
        await go_on.wait()  # frozen here past the lease
        await ctx.http.post(f"{base}/send/2")
        return "sent"

    send_tool = tool(name="send", description="Send.", input=Mail, execute=send)
    bot = agent(
        name="t",
        model=scripted_model([use(call("send", "c1", to="x")), say("ok")]),
        tools=[send_tool],
    )
    task = asyncio.create_task(bot.run("go", store=store, principal=ALICE))
    try:
        await first_sent.wait()
        [thread] = await store.list_threads()
        await steal_lease(store, clock, thread.thread_id)
        go_on.set()
        result = await task
    finally:
        server.close()
    assert isinstance(result, Failed)
    assert result.error.code == "stale_epoch"
    assert hits == ["/send/1"]  # the second request never left
    assert epochs == [2]  # the branch was created with thread_started at epoch 1; this holder is 2


async def test_ctx_epoch_grows_with_each_holder(store: Store) -> None:
    epochs: list[int] = []

    async def read(args: Mail, ctx: Any) -> str:
        epochs.append(ctx.epoch)
        return "ok"

    read_tool = tool(name="read", description="Read.", input=Mail, execute=read, effect="read_only")
    script = [
        use(call("read", "c1", to="a")),
        say("one"),
        use(call("read", "c2", to="b")),
        say("two"),
    ]
    bot = agent(name="t", model=scripted_model(script), tools=[read_tool])
    first = await bot.run("go", store=store, principal=ALICE)
    await bot.run("again", store=store, thread=first.thread.id, principal=ALICE)
    assert len(epochs) == 2
    assert epochs[1] > epochs[0]


class Provider:
    """A provider the tool sends to; ``applied`` counts what it applied, per effect key."""

    def __init__(self) -> None:
        self.applied: dict[str, int] = {}
        self.lookups = 0

    async def lookup(self, key: str, ctx: Any) -> Found[str] | NotFound:
        self.lookups += 1
        return Found("sent") if self.applied.get(key) else NotFound()


def mailer(
    provider: Provider, *, frozen: asyncio.Event | None = None, inside: asyncio.Event | None = None
) -> Agent:
    async def send(args: Mail, ctx: Any) -> str:
        if inside is not None:
            inside.set()
        if frozen is not None:
            await frozen.wait()  # SIGSTOPped after passing its checks; the send lands on wake
        provider.applied[ctx.effect_key] = provider.applied.get(ctx.effect_key, 0) + 1
        return "sent"

    send_email = tool(
        name="send_email",
        description="Mail.",
        input=Mail,
        execute=send,
        effect="reconcilable",
        reconcile=Reconcile(provider.lookup, finality="final"),
        settle_ms=SETTLE_MS,
    )
    script = [use(call("send_email", "c1", to="x@example.com")), say("done")]
    return agent(name="mail", model=scripted_model(script), tools=[send_email])


async def frozen_in_the_send(
    store: Store, clock: FakeClock, provider: Provider, frozen: asyncio.Event
) -> tuple[asyncio.Task[Any], str]:
    """A first holder stuck inside its send (until ``frozen`` is set) past its lease; the task
    and the thread id."""
    inside = asyncio.Event()
    bot = mailer(provider, frozen=frozen, inside=inside)
    holder = asyncio.create_task(bot.run("go", store=store, principal=ALICE))
    await inside.wait()
    [thread] = await store.list_threads()
    clock.advance(TTL_MS + 1)
    return holder, thread.thread_id


async def died_in_the_send(store: Store, clock: FakeClock, provider: Provider) -> str:
    """The same holder, SIGKILLed instead: it never sends."""
    holder, thread_id = await frozen_in_the_send(store, clock, provider, asyncio.Event())
    holder.cancel()
    with pytest.raises(asyncio.CancelledError):
        await holder
    return thread_id


async def test_a_final_not_found_is_not_trusted_while_an_earlier_holder_may_send(
    tmp_path: Path, clock: FakeClock
) -> None:
    provider = Provider()
    frozen = asyncio.Event()
    first_store = sqlite(tmp_path / "store", clock=clock)
    second_store = sqlite(tmp_path / "store", clock=clock)  # another process, same store
    try:
        zombie, thread_id = await frozen_in_the_send(first_store, clock, provider, frozen)
        taken_over = clock.now_ms()

        # the second runner takes over: the lookup says not found, but the first may still send
        second = await mailer(provider).run(
            None, store=second_store, thread=thread_id, principal=ALICE
        )
        assert isinstance(second, Parked)
        assert second.reason == "effect_unknown"
        [pending] = second.pending
        assert pending.detail is not None
        assert "earlier holder of this thread (epoch 2) may still be running" in pending.detail
        assert "assume_not_done is refused" in pending.detail
        assert provider.applied == {}

        # the operator checks the provider during the freeze: assume_not_done is refused
        handle = Thread(second_store, thread_id)
        head = (await second_store.root_branch(thread_id)).head_seq
        with pytest.raises(ControlError) as refused:
            await handle.resolve_parked(pending.id, "assume_not_done", ALICE)
        assert refused.value.code == "holder_may_be_running"
        assert (await second_store.root_branch(thread_id)).head_seq == head
        [listed] = await handle.parked_effects()
        assert "may still be running" in listed.detail

        # a run inside the window does not send either
        clock.advance(SETTLE_MS // 2)
        again = await mailer(provider).run(
            None, store=second_store, thread=thread_id, principal=ALICE
        )
        assert isinstance(again, Parked)

        # the zombie wakes: its own send lands, then its writes are refused
        frozen.set()
        woke = await zombie
        assert isinstance(woke, Failed)
        assert woke.error.code == "stale_epoch"
        assert provider.applied == {pending.id: 1}

        # after the window a run looks again, finds the zombie's send, and never resends
        clock.set(taken_over + SETTLE_MS + 1)
        done = await mailer(provider).run(
            None, store=second_store, thread=thread_id, principal=ALICE
        )
        assert isinstance(done, Completed)
        assert provider.applied == {pending.id: 1}  # 0 duplicates
        events = await Thread(second_store, thread_id).timeline()
        assert [e.data["outcome"] for e in events if e.type == "effect_resolved"] == [
            "confirmed_success"
        ]
        await assert_export_is_valid(Thread(second_store, thread_id))
    finally:
        await first_store.close()
        await second_store.close()


async def test_after_the_window_a_final_not_found_resends_once(
    tmp_path: Path, clock: FakeClock
) -> None:
    provider = Provider()
    first_store = sqlite(tmp_path / "store", clock=clock)
    second_store = sqlite(tmp_path / "store", clock=clock)
    try:
        thread_id = await died_in_the_send(first_store, clock, provider)
        parked = await mailer(provider).run(
            None, store=second_store, thread=thread_id, principal=ALICE
        )
        assert isinstance(parked, Parked)  # threads can't tell a death from a freeze
        clock.advance(SETTLE_MS + 1)
        handle = Thread(second_store, thread_id)
        [listed] = await handle.parked_effects()
        assert "window ended" in listed.detail
        done = await mailer(provider).run(
            None, store=second_store, thread=thread_id, principal=ALICE
        )
        assert isinstance(done, Completed)
        assert provider.applied == {parked.pending[0].id: 1}
        assert provider.lookups == 2
    finally:
        await first_store.close()
        await second_store.close()


async def test_assume_not_done_is_allowed_once_the_window_is_over(
    tmp_path: Path, clock: FakeClock
) -> None:
    sent: list[str] = []
    inside = asyncio.Event()

    async def send(args: Mail, ctx: Any) -> str:
        sent.append(ctx.effect_key)
        inside.set()
        await asyncio.Event().wait()
        return "sent"

    async def send_now(args: Mail, ctx: Any) -> str:
        sent.append(ctx.effect_key)
        return "sent"

    script = [use(call("send_email", "c1", to="x@example.com")), say("done")]

    def bot(execute: Any) -> Agent:
        unguarded = tool(
            name="send_email", description="Mail.", input=Mail, execute=execute, settle_ms=SETTLE_MS
        )
        return agent(name="mail", model=scripted_model(script), tools=[unguarded])

    store = sqlite(tmp_path / "store", clock=clock)
    try:
        task = asyncio.create_task(bot(send).run("go", store=store, principal=ALICE))
        await inside.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        [thread] = await store.list_threads()
        parked = await bot(send_now).run(
            None, store=store, thread=thread.thread_id, principal=ALICE
        )
        assert isinstance(parked, Parked)
        handle = Thread(store, thread.thread_id, agent=bot(send_now))
        key = parked.pending[0].id
        with pytest.raises(ControlError) as early:
            await handle.resolve_parked(key, "assume_not_done", ALICE)
        assert early.value.code == "holder_may_be_running"
        clock.advance(SETTLE_MS + 1)
        await handle.resolve_parked(key, "assume_not_done", ALICE)
        done = await bot(send_now).run(None, store=store, thread=thread.thread_id, principal=ALICE)
        assert isinstance(done, Completed)
        assert sent == [key, key]
    finally:
        await store.close()


async def test_the_operator_listing_says_an_earlier_holder_may_be_running(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    provider = Provider()
    store = sqlite(tmp_path / "store", clock=clock)
    try:
        thread_id = await died_in_the_send(store, clock, provider)
        parked = await mailer(provider).run(None, store=store, thread=thread_id, principal=ALICE)
        assert isinstance(parked, Parked)
    finally:
        await store.close()
    # the CLI reads the store with the real clock: long after the fake takeover time
    code = await asyncio.to_thread(
        cli_main,
        [
            "approvals",
            thread_id,
            "--store",
            str(tmp_path / "store"),
            "--tenant",
            "acme",
            "--subject",
            "alice",
        ],
    )
    assert code == 0
    out = capsys.readouterr().out
    assert f"parked      {parked.pending[0].id}" in out
    assert "send_email" in out
    assert "earlier holder (epoch 2)" in out


async def test_a_run_that_fails_hands_its_lease_back(store: Store) -> None:
    error = ModelCallError(
        "bad reply", reason="provider_error", provider_outcome="failed", code="model_error"
    )
    bot = agent(name="t", model=scripted_model([Fail(error), say("never reached")]))
    failed = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(failed, Failed)
    branch = await store.root_branch(failed.thread.id)
    # free at once, without waiting out the TTL
    lease = await store.acquire_lease(branch.branch_id, "next-runner", TTL_MS)
    assert lease.epoch == 3  # thread_started (with the branch) 1, the failed run 2


async def test_a_run_that_raises_hands_its_lease_back(store: Store) -> None:
    real_append = store.append
    appends = 0

    async def flaky_append(*args: Any, **kwargs: Any) -> Any:
        nonlocal appends
        appends += 1
        if appends == 3:
            raise OSError("disk unplugged")
        return await real_append(*args, **kwargs)

    store.append = flaky_append  # type: ignore[method-assign]
    bot = agent(name="t", model=scripted_model([say("hello")]))
    with pytest.raises(OSError, match="disk unplugged"):
        await bot.run("go", store=store, principal=ALICE)
    store.append = real_append  # type: ignore[method-assign]
    [thread] = await store.list_threads()
    lease = await store.acquire_lease(thread.branch_id, "next-runner", TTL_MS)
    assert holder.parse(lease.holder_id).run == "next-runner"  # the store adds who holds it


async def test_a_lost_lease_is_never_released_by_the_old_holder(
    store: Store, clock: FakeClock
) -> None:
    inside, go_on = asyncio.Event(), asyncio.Event()

    async def slow(args: Mail, ctx: Any) -> str:
        inside.set()
        await go_on.wait()
        return "ok"

    slow_tool = tool(name="slow", description="Slow.", input=Mail, execute=slow, effect="read_only")
    bot = agent(
        name="t",
        model=scripted_model([use(call("slow", "c1", to="a")), say("ok")]),
        tools=[slow_tool],
    )
    task = asyncio.create_task(bot.run("go", store=store, principal=ALICE))
    await inside.wait()
    [thread] = await store.list_threads()
    await steal_lease(store, clock, thread.thread_id)
    go_on.set()
    assert isinstance(await task, Failed)
    with pytest.raises(StoreError) as busy:  # the thief's lease survived the old run's end
        await store.acquire_lease(thread.branch_id, "third", TTL_MS)
    assert busy.value.code == "branch_busy"


async def test_a_worker_runs_a_window_park_again_once_the_window_is_over(
    store: Store, clock: FakeClock
) -> None:
    provider = Provider()
    thread_id = await died_in_the_send(store, clock, provider)
    parked = await mailer(provider).run(None, store=store, thread=thread_id, principal=ALICE)
    assert isinstance(parked, Parked)
    worker = Worker(store, [mailer(provider)])
    assert (await worker.run_once()).runs == 0  # the window is still open: nothing to do
    assert (await worker.run_once()).runs == 0  # and it is not re-read for nothing
    clock.advance(SETTLE_MS + 1)
    stats = await worker.run_once()
    assert stats.runs == 1
    assert stats.outcomes == {"completed": 1}
    assert provider.applied == {parked.pending[0].id: 1}
    assert (await worker.run_once()).runs == 1  # done: no further run
