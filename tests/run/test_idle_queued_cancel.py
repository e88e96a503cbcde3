"""A cancel queued for a parent whose turn is over but whose run still waits for its background
children (digest §6.2–6.3, issue 34): ``queue_cancel`` accepts it while a child is unreported,
the waiting run applies it as ``Thread.cancel`` on an idle parent does (one
``cancel_requested{scope: thread}`` with the asker as actor, each unfinished child barred and run
to its cancelled end, recorded without ``woken``) and returns ``Cancelled``; with nothing open
and every child reported it is still ``not_pending``; a stranger of the same tenant is refused
as ``cancel`` refuses. Both engines."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from postgres_support import URL
from threads import (
    Cancelled,
    ControlError,
    Parked,
    Permissions,
    Principal,
    agent,
    ask_user,
    open_thread,
    tool,
)
from threads.errors import StoreError
from threads.log.lines import Event
from threads.run import queued_controls
from threads.run.agent import Agent
from threads.run.results import RunResult
from threads.run.thread import Thread
from threads.store.postgres import PostgresStore
from threads.store.protocol import Store
from threads.store.sqlite import SQLiteStore
from threads.testing import Reply, call, say, scripted_model, use
from threads.tools.tool import EffectUnknown, Tool

ALICE = Principal("api", "acme", "alice")
BOB = Principal("api", "acme", "bob")


class Note(BaseModel):
    text: str


def of_type(events: list[Event], type_: str) -> list[Event]:
    return [e for e in events if e.type == type_]


def stuck_parent(inside: asyncio.Event) -> Agent:
    """A parent that starts a background child and ends its turn; the child's tool never
    returns on its own."""

    async def forever(args: Note, ctx: object) -> str:
        inside.set()
        await asyncio.Event().wait()
        return "never"

    stuck: Tool[object] = tool(name="write_note", description="Write a note.", input=Note,
                               execute=forever, effect="read_only")
    child = agent(name="clerk", model=scripted_model([use(call("write_note", text="x")),
                                                      say("never")]), tools=[stuck])
    return agent(name="boss", model=scripted_model([
        use(call("spawn_agent", agent="clerk", prompt="slow", background=True)),
        say("started it"),
        say("never: the parent is not woken"),
    ]), tools=[stuck], subagents=[child])


QUEUE_ELSEWHERE = """
import asyncio, sys
from pathlib import Path
from threads import FakeClock, Principal, open_thread, sqlite
from threads.errors import StoreError
from threads.store.postgres import postgres

async def main(kind, where, thread_id, now):
    clock = FakeClock(int(now))  # the test's clock: the run's lease is live on it
    store = postgres(where.split(" ")[0], schema=where.split(" ")[1], clock=clock) \\
        if kind == "postgres" else sqlite(Path(where), clock=clock)
    alice = Principal("api", "acme", "alice")
    try:
        thread = await open_thread(store, thread_id, principal=alice)
        try:
            await thread.cancel(alice)
        except StoreError as busy:
            print(busy.code)
        print(await thread.queue_cancel(alice))
    finally:
        await store.close()

asyncio.run(main(*sys.argv[1:]))
"""


async def in_another_process(store: Store, thread: Thread) -> None:
    """``threads cancel`` from another process: ``branch_busy``, so it queues the cancel."""
    if isinstance(store, PostgresStore):
        kind, where = "postgres", f"{URL} {store.schema}"
    else:
        assert isinstance(store, SQLiteStore)
        assert store.root is not None
        kind, where = "sqlite", str(store.root)
    now = str(store.clock.now_ms())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", QUEUE_ELSEWHERE, kind, where, thread.id, now,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().split()[0] == "branch_busy"


async def in_this_process(store: Store, thread: Thread) -> None:
    """A second handle on the same store: ``cancel`` is ``branch_busy``; a stranger of the
    tenant is refused as ``cancel`` refuses; the owner's cancel is queued."""
    with pytest.raises(StoreError) as busy:  # the waiting run holds the parent
        await thread.cancel(ALICE)
    assert busy.value.code == "branch_busy"
    with pytest.raises(ControlError) as stranger:
        await thread.queue_cancel(BOB)
    assert stranger.value.code == "forbidden"
    await thread.queue_cancel(ALICE)


@pytest.mark.parametrize("queue", [in_this_process, in_another_process])
async def test_a_cancel_queued_while_the_run_waits_for_its_background_child(
    store: Store, monkeypatch: pytest.MonkeyPatch,
    queue: Callable[[Store, Thread], Awaitable[None]],
) -> None:
    monkeypatch.setattr(queued_controls, "CANCEL_POLL_S", 0)  # look at every loop turn
    inside, turn_over = asyncio.Event(), asyncio.Event()
    append = store.append

    async def watching(branch_id: str, events: list[Event], **kwargs: object) -> None:
        await append(branch_id, events, **kwargs)  # type: ignore[arg-type]
        if any(e.type == "turn_completed" for e in events):
            turn_over.set()  # the child never ends its turn: this is the parent's

    monkeypatch.setattr(store, "append", watching)
    parent = stuck_parent(inside)
    running = asyncio.create_task(parent.run("go", store=store, principal=ALICE))
    await asyncio.wait_for(asyncio.gather(inside.wait(), turn_over.wait()), 30)
    [info] = [t for t in await store.list_threads(ALICE.tenant)
              if (await (await open_thread(store, t.thread_id, principal=ALICE)).children())]
    thread = await open_thread(store, info.thread_id, principal=ALICE)  # a second handle
    assert (await thread.fold()).turn is None
    await queue(store, thread)

    result = await asyncio.wait_for(running, 30)
    assert isinstance(result, Cancelled), result
    events = await thread.timeline()
    [barrier] = of_type(events, "cancel_requested")
    assert barrier.data == {"reason": queued_controls.QUEUED_REASON, "scope": "thread"}
    assert barrier.actor == {"kind": "user", "principal": ALICE.to_wire()}
    assert of_type(events, "woken") == []
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "cancelled"
    assert barrier.seq < finished.seq
    [late] = of_type(events, "tool_result_late")
    assert late.data["preview"] == "cancelled: cancelled"
    [kid] = await thread.children()
    assert kid.status == "cancelled"
    kid_events = await (await open_thread(store, kid.thread_id, principal=ALICE)).timeline()
    [kid_barrier] = of_type(kid_events, "cancel_requested")
    assert kid_barrier.data == {"reason": "ancestor cancelled", "scope": "tree"}
    [closed] = of_type(kid_events, "tool_result")
    assert closed.data["preview"] == "not executed: cancelled"

    head = events[-1].seq
    await parent.run(None, thread=thread.id, store=store, principal=ALICE)  # nothing left
    assert (await thread.timeline())[-1].seq == head
    # Every child reported, and the cancel is the thread's latest word: a second one is
    # accepted, never refused; it records nothing (an item never cancels a later turn).
    assert await thread.queue_cancel(ALICE)
    await parent.run(None, thread=thread.id, store=store, principal=ALICE)
    assert (await thread.timeline())[-1].seq == head


async def test_queue_cancel_with_nothing_open_and_no_child_is_not_pending(store: Store) -> None:
    lone = agent(name="lone", model=scripted_model([say("hi")]))
    done = await lone.run("go", store=store, principal=ALICE)
    thread = await open_thread(store, done.thread.id, principal=ALICE)
    with pytest.raises(ControlError) as nothing:
        await thread.queue_cancel(ALICE)
    assert nothing.value.code == "not_pending"


@dataclass
class Kit:
    """What the parked-run tests share: ``wait`` (read-only; it never returns on its own, and
    sets ``inside`` once it runs), ``write_note`` (idempotent; appends to ``applied``), the
    children ``slow`` (stuck in ``wait``) and ``asks`` (its ``write_note`` needs an approval),
    and ``send`` (its effect is left in doubt)."""

    inside: asyncio.Event = field(default_factory=asyncio.Event)
    applied: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        async def forever(args: Note, ctx: object) -> str:
            self.inside.set()
            await asyncio.Event().wait()
            return "never"

        async def write(args: Note, ctx: object) -> str:
            self.applied.append(args.text)
            return "written"

        async def cut(args: Note, ctx: object) -> str:
            raise EffectUnknown("the connection dropped after sending")

        self.stuck: Tool[object] = tool(name="wait", description="Wait.", input=Note,
                                        execute=forever, effect="read_only")
        self.note: Tool[object] = tool(name="write_note", description="Write.", input=Note,
                                       execute=write, effect="idempotent",
                                       dedup_window_ms=60_000)
        self.send: Tool[object] = tool(name="send", description="Send.", input=Note, execute=cut)
        self.slow = agent(name="slow", model=scripted_model([use(call("wait", text="x")),
                                                             say("never")]), tools=[self.stuck])
        self.asks = agent(name="asks", model=scripted_model([use(call("write_note", text="y")),
                                                             say("never")]),
                          tools=[self.note], permissions=Permissions(ask=["write_note"]))

    def boss(self, *replies: Reply, **kwargs: Any) -> Agent:
        return agent(name="boss", model=scripted_model(list(replies)),
                     tools=[self.stuck, self.note, self.send, ask_user],
                     subagents=[self.slow, self.asks], **kwargs)


async def waiting_parked(
    store: Store, monkeypatch: pytest.MonkeyPatch, kit: Kit, parent: Agent,
    parks: Callable[[Event], bool],
) -> tuple[Thread, asyncio.Task[RunResult]]:
    """Start ``parent``'s run and return once its background child runs and it appended a
    ``parked`` that ``parks`` picks (the run still going): a second handle on the parent, and
    the run."""
    parked = asyncio.Event()
    append = store.append

    async def watching(branch_id: str, events: list[Event], **kwargs: object) -> None:
        await append(branch_id, events, **kwargs)  # type: ignore[arg-type]
        if any(e.type == "parked" and parks(e) for e in events):
            parked.set()

    monkeypatch.setattr(store, "append", watching)
    running = asyncio.create_task(parent.run("go", store=store, principal=ALICE))
    await asyncio.wait_for(asyncio.gather(kit.inside.wait(), parked.wait()), 30)
    [info] = [t for t in await store.list_threads(ALICE.tenant)
              if (await (await open_thread(store, t.thread_id, principal=ALICE)).children())]
    return await open_thread(store, info.thread_id, principal=ALICE), running


async def within(running: asyncio.Task[RunResult], seconds: float = 10) -> RunResult:
    """The run's result, which a waiting run that applies the queued cancel gives soon."""
    try:
        return await asyncio.wait_for(asyncio.shield(running), seconds)
    except TimeoutError:
        running.cancel()
        raise AssertionError("the waiting run left the queued cancel for its next run") from None


def on_child(event: Event) -> bool:
    return bool(event.data["address"]["kind"] == "child")


def on_any(event: Event) -> bool:
    return True


async def test_a_queued_cancel_reaches_a_parked_child_beside_a_running_one(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One background child parked on an approval (the parent is parked on it), another still
    running: the queued cancel bars both; the waiting run ends the running one and returns
    ``Parked`` (the parked child's end is still to be recorded: a cancel never precedes an
    unsettled descendant); the parent's next run records it cancelled, nothing applied."""
    monkeypatch.setattr(queued_controls, "CANCEL_POLL_S", 0)
    kit = Kit()
    parent = kit.boss(
        use(call("spawn_agent", agent="slow", prompt="a", background=True),
            call("spawn_agent", agent="asks", prompt="b", background=True)),
        say("started them"),
        say("never"),
    )
    thread, running = await waiting_parked(store, monkeypatch, kit, parent, on_child)
    await thread.queue_cancel(ALICE)
    first = await asyncio.wait_for(running, 30)
    assert isinstance(first, Parked), first
    second = await parent.run(None, thread=thread.id, store=store, principal=ALICE)
    assert not isinstance(second, Parked), second
    events = await thread.timeline()
    assert len(of_type(events, "cancel_requested")) == 1
    assert of_type(events, "woken") == []
    assert [c.status for c in await thread.children()] == ["cancelled", "cancelled"]
    assert kit.applied == []


@pytest.mark.parametrize("question", [False, True], ids=["approval", "question"])
async def test_a_cancel_queued_while_the_parked_run_waits_is_carried_out_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, question: bool,
) -> None:
    """The parent's one reply starts a background child and makes a call it must wait for (a
    ``write_note`` that needs an approval, or an ``ask_user``): its turn is parked while its
    run waits for the child. A cancel queued then is applied by that run, not left for the next
    one: the turn's barrier (the asker as actor), the park ended (``resumed``, the call ``not
    executed: cancelled``), the turn ``cancelled``, the child barred and recorded cancelled
    (no ``woken``); the run returns ``Cancelled`` and nothing was applied."""
    monkeypatch.setattr(queued_controls, "CANCEL_POLL_S", 0)
    kit = Kit()
    waits = (call("ask_user", "q1", question="Which?", options=["a", "b"]) if question
             else call("write_note", "w1", text="y"))
    parent = kit.boss(use(call("spawn_agent", agent="slow", prompt="a", background=True), waits),
                      say("never: the turn is cancelled"),
                      permissions=Permissions(ask=["write_note"]))
    thread, running = await waiting_parked(store, monkeypatch, kit, parent, on_any)
    assert (await thread.fold()).turn is not None  # open, parked
    await in_this_process(store, thread)

    result = await within(running)
    assert isinstance(result, Cancelled), result
    events = await thread.timeline()
    [barrier] = of_type(events, "cancel_requested")
    assert barrier.data == {"reason": queued_controls.QUEUED_REASON, "scope": "turn"}
    assert barrier.actor == {"kind": "user", "principal": ALICE.to_wire()}
    [resumed] = of_type(events, "resumed")
    assert resumed.data["address"]["kind"] == ("input" if question else "approval")
    [closed] = [e for e in of_type(events, "tool_result")
                if e.data["call_id"] == ("q1" if question else "w1")]
    assert (closed.data["origin"], closed.data["preview"]) == (
        "not_executed", "not executed: cancelled")
    assert barrier.seq < resumed.seq
    assert (await thread.fold()).parks == {}
    assert [e.data for e in of_type(events, "turn_completed")] == [{"reason": "cancelled"}]
    assert of_type(events, "woken") == []
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "cancelled"
    [kid] = await thread.children()
    kid_events = await (await open_thread(store, kid.thread_id, principal=ALICE)).timeline()
    [kid_barrier] = of_type(kid_events, "cancel_requested")
    assert kid_barrier.data == {"reason": "ancestor cancelled", "scope": "tree"}
    assert kit.applied == []

    head = events[-1].seq
    again = await parent.run(None, thread=thread.id, store=store, principal=ALICE)
    assert not isinstance(again, Parked), again
    assert (await thread.timeline())[-1].seq == head  # nothing was left for the next run


async def test_a_cancel_queued_while_the_run_waits_parked_on_a_child_ends_the_child(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent's turn is parked on a foreground child that waits for an approval, while its
    run waits for a background child. The queued cancel is carried out by that run: the parked
    child runs again under the barrier (its approval ended, nothing applied) and is recorded
    cancelled, the turn ends ``cancelled``, the background child is stopped."""
    monkeypatch.setattr(queued_controls, "CANCEL_POLL_S", 0)
    kit = Kit()
    parent = kit.boss(use(call("spawn_agent", agent="slow", prompt="a", background=True),
                          call("spawn_agent", agent="asks", prompt="b")),
                      say("never: the turn is cancelled"))
    thread, running = await waiting_parked(store, monkeypatch, kit, parent, on_child)
    assert (await thread.fold()).turn is not None
    await thread.queue_cancel(ALICE)
    result = await within(running)
    assert isinstance(result, Cancelled), result
    events = await thread.timeline()
    assert [e.data["scope"] for e in of_type(events, "cancel_requested")] == ["turn"]
    assert [e.data for e in of_type(events, "turn_completed")] == [{"reason": "cancelled"}]
    assert of_type(events, "woken") == []
    assert [c.status for c in await thread.children()] == ["cancelled", "cancelled"]
    assert (await thread.fold()).parks == {}
    assert kit.applied == []


async def test_a_cancel_queued_while_parked_on_an_effect_stops_the_background_child(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent's turn is parked on an effect in doubt (a cancel can't end that) while its
    run waits for a background child. The queued cancel becomes the turn's barrier, the child
    is stopped and recorded cancelled, and the run returns ``Parked`` on the effect."""
    monkeypatch.setattr(queued_controls, "CANCEL_POLL_S", 0)
    kit = Kit()
    parent = kit.boss(use(call("spawn_agent", agent="slow", prompt="a", background=True),
                          call("send", "s1", text="y")),
                      say("never"))
    thread, running = await waiting_parked(store, monkeypatch, kit, parent, on_any)
    await thread.queue_cancel(ALICE)
    result = await within(running)
    assert isinstance(result, Parked), result
    assert [p.kind for p in result.pending] == ["effect"]
    events = await thread.timeline()
    assert [e.data["scope"] for e in of_type(events, "cancel_requested")] == ["turn"]
    assert of_type(events, "turn_completed") == []  # parked on the effect: never cancelled
    [kid] = await thread.children()
    assert kid.status == "cancelled"
