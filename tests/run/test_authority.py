"""Authority where it is used: ``resolve_parked``, ``approve``, ``deny`` and ``cancel`` follow one
rule (the agent's approvers, else the thread's starter; another tenant never), a handle's
``approvers`` can't widen it, and a run re-checks a recorded human decision against the same rule
before acting on it (one a stranger forged straight into the store counts as not made)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import BaseModel
from test_written_logs import assert_export_is_valid

from threads import (
    Completed,
    ControlError,
    FakeClock,
    Parked,
    Permissions,
    Principal,
    Thread,
    agent,
    open_thread,
    tool,
)
from threads.run.agent import Agent
from threads.run.control import control_writer
from threads.run.drafts import resumed_data
from threads.store.protocol import Store
from threads.testing.scripted import call, say, scripted_model, use
from threads.tools.tool import DEFAULT_SETTLE_MS

ALICE = Principal("api", "acme", "alice")  # starts every thread here
BOB = Principal("api", "acme", "bob")  # an approver when the agent names him
EVE = Principal("api", "acme", "eve")  # same tenant, no standing
MALLORY = Principal("api", "other", "mallory")  # another tenant


class Mail(BaseModel):
    to: str


def mail_bot(sent: list[str], *, hang: asyncio.Event | None = None, **kwargs: Any) -> Agent:
    started = kwargs.pop("started", None)

    async def send(args: Mail, ctx: Any) -> str:
        sent.append(ctx.effect_key)
        if started is not None:
            started.set()
        if hang is not None:
            await hang.wait()
        return "sent"

    send_email = tool(name="send_email", description="Mail.", input=Mail, execute=send)
    script = [use(call("send_email", "c1", to="x@example.com")), say("done")]
    return agent(name="mail", model=scripted_model(script), tools=[send_email], **kwargs)


async def parked_effect(store: Store, sent: list[str], **kwargs: Any) -> tuple[Agent, str]:
    """A thread whose email may have been sent (the run died inside the send), then parked."""
    hang, started = asyncio.Event(), asyncio.Event()
    first = mail_bot(sent, hang=hang, started=started, **kwargs)
    task = asyncio.create_task(first.run("go", store=store, principal=ALICE))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [thread] = await store.list_threads()
    bot = mail_bot(sent, **kwargs)
    parked = await bot.run(None, store=store, thread=thread.thread_id, principal=ALICE)
    assert isinstance(parked, Parked)
    assert parked.reason == "effect_unknown"
    return bot, parked.pending[0].id


async def parked_approval(store: Store, sent: list[str], **kwargs: Any) -> tuple[Agent, str]:
    bot = mail_bot(sent, permissions=Permissions(ask=("send_email",)), **kwargs)
    parked = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    assert parked.reason == "awaiting_approval"
    return bot, parked.thread.id


def past_the_window(store: Store) -> None:
    """The run that parked took over from a dead one: wait out the zombie window (there is no
    zombie here) so that assume_not_done is accepted."""
    clock = store.clock
    assert isinstance(clock, FakeClock)
    clock.advance(DEFAULT_SETTLE_MS + 1)


async def head(store: Store, thread_id: str) -> int:
    return (await store.root_branch(thread_id)).head_seq


async def refused(store: Store, thread_id: str, control: Awaitable[None]) -> None:
    before = await head(store, thread_id)
    with pytest.raises(ControlError) as error:
        await control
    assert error.value.code == "forbidden"
    assert "nothing was recorded" in error.value.message
    assert await head(store, thread_id) == before  # nothing appended


def handles(store: Store, thread_id: str, bot: Agent) -> list[Callable[[], Thread]]:
    """Every way a stranger might hold the thread: plain, told she approves (can't widen),
    and with the agent."""
    return [
        lambda: Thread(store, thread_id),
        lambda: Thread(store, thread_id, approvers=[EVE]),
        lambda: Thread(store, thread_id, agent=bot),
        lambda: Thread(store, thread_id, agent=bot, approvers=[EVE]),
    ]


@pytest.mark.parametrize("decision", ["assume_done", "assume_not_done"])
async def test_a_stranger_can_not_resolve_a_park(store: Store, decision: Any) -> None:
    sent: list[str] = []
    bot, key = await parked_effect(store, sent)
    [thread] = await store.list_threads()
    for make in handles(store, thread.thread_id, bot):
        await refused(store, thread.thread_id, make().resolve_parked(key, decision, EVE))
        await refused(store, thread.thread_id, make().resolve_parked(key, decision, MALLORY))
    again = await bot.run(None, store=store, thread=thread.thread_id, principal=ALICE)
    assert isinstance(again, Parked)
    assert len(sent) == 1


@pytest.mark.parametrize("control", ["approve", "deny"])
async def test_a_stranger_can_not_decide_an_approval(store: Store, control: str) -> None:
    sent: list[str] = []
    bot, thread_id = await parked_approval(store, sent)
    [pending] = await Thread(store, thread_id).pending_approvals()
    for make in handles(store, thread_id, bot):
        for who in (EVE, MALLORY):
            decide = getattr(make(), control)
            await refused(store, thread_id, decide(pending.challenge_id, who))
    assert sent == []


async def test_a_stranger_can_not_cancel(store: Store) -> None:
    sent: list[str] = []
    bot, thread_id = await parked_approval(store, sent)
    for make in handles(store, thread_id, bot):
        await refused(store, thread_id, make().cancel(EVE))
        await refused(store, thread_id, make().cancel(MALLORY))
    await Thread(store, thread_id).cancel(ALICE)  # the starter may


async def test_the_agents_approvers_decide_and_the_starter_does_not(store: Store) -> None:
    sent: list[str] = []
    bot, key = await parked_effect(store, sent, approvers=[BOB])
    [thread] = await store.list_threads()
    knows_agent = await open_thread(store, thread.thread_id, agent=bot)
    await refused(store, thread.thread_id, knows_agent.resolve_parked(key, "assume_done", ALICE))
    past_the_window(store)
    await knows_agent.resolve_parked(key, "assume_not_done", BOB)
    done = await bot.run(None, store=store, thread=thread.thread_id, principal=ALICE)
    assert isinstance(done, Completed)
    assert sent == [key, key]  # resent once, same key


async def test_a_starters_resolution_the_agent_does_not_allow_is_not_acted_on(
    store: Store,
) -> None:
    sent: list[str] = []
    bot, key = await parked_effect(store, sent, approvers=[BOB])
    [thread] = await store.list_threads()
    past_the_window(store)
    # a handle that does not know the agent lets the starter through (the rule's fallback) ...
    await Thread(store, thread.thread_id).resolve_parked(key, "assume_not_done", ALICE)
    # ... and the run, which knows the agent, treats that resolution as not made
    again = await bot.run(None, store=store, thread=thread.thread_id, principal=ALICE)
    assert isinstance(again, Parked)
    assert [p.id for p in again.pending] == [key]
    assert len(sent) == 1
    # an approver may still resolve the re-parked effect
    await Thread(store, thread.thread_id, agent=bot).resolve_parked(key, "assume_done", BOB)
    done = await bot.run(None, store=store, thread=thread.thread_id, principal=ALICE)
    assert isinstance(done, Completed)
    assert len(sent) == 1


async def forge(store: Store, thread_id: str, build: Callable[[Any], list[Any]]) -> None:
    """Append events as a stranger would, straight through the store (no control's check)."""
    branch = await store.root_branch(thread_id)
    async with control_writer(store, branch.branch_id) as writer:
        await writer.append(build(writer.fold))


def as_eve() -> dict[str, Any]:
    return {"kind": "approver", "principal": EVE.to_wire()}


@pytest.mark.parametrize(
    ("decision", "by"),
    [("assume_done", "human"), ("assume_not_done", "human"), ("safe_to_retry", "reconcile")],
)
async def test_a_resolution_forged_by_a_stranger_is_not_acted_on(
    store: Store, decision: str, by: str
) -> None:
    sent: list[str] = []
    bot, key = await parked_effect(store, sent)
    [thread] = await store.list_threads()

    def resolution(fold: Any) -> list[Any]:
        [c] = [c for c in fold.calls.values() if c.effect_key == key]
        address = fold.parks[("effect", key)]
        return [
            (
                "effect_resolved",
                {"by": by, "call_id": c.call_id, "outcome": decision},
                as_eve(),
            ),
            ("resumed", resumed_data(fold, address), as_eve()),
        ]

    await forge(store, thread.thread_id, resolution)
    for _ in range(2):
        again = await bot.run(None, store=store, thread=thread.thread_id, principal=ALICE)
        assert isinstance(again, Parked)
        assert [p.id for p in again.pending] == [key]
    assert len(sent) == 1
    events = await Thread(store, thread.thread_id).timeline()
    assert not [e for e in events if e.type == "tool_result"]
    # the starter's own decision then stands
    past_the_window(store)
    await Thread(store, thread.thread_id).resolve_parked(key, "assume_not_done", ALICE)
    done = await bot.run(None, store=store, thread=thread.thread_id, principal=ALICE)
    assert isinstance(done, Completed)
    assert sent == [key, key]
    await assert_export_is_valid(Thread(store, thread.thread_id))


@pytest.mark.parametrize("kind", ["approval_granted", "approval_denied"])
async def test_a_decision_forged_by_a_stranger_is_not_acted_on(
    store: Store, kind: str
) -> None:
    sent: list[str] = []
    bot, thread_id = await parked_approval(store, sent)
    [pending] = await Thread(store, thread_id).pending_approvals()

    def decision(fold: Any) -> list[Any]:
        data = {
            "args_hash": pending.args_hash,
            "call_id": pending.call_id,
            "challenge_id": pending.challenge_id,
        }
        address = fold.parks[("approval", pending.challenge_id)]
        return [(kind, data, as_eve()), ("resumed", resumed_data(fold, address), as_eve())]

    await forge(store, thread_id, decision)
    again = await bot.run(None, store=store, thread=thread_id, principal=ALICE)
    assert isinstance(again, Parked)
    assert again.reason == "awaiting_approval"
    assert sent == []
    events = await Thread(store, thread_id).timeline()
    assert not [e for e in events if e.type == "tool_result"]  # not run, and not denied either
    [fresh] = await Thread(store, thread_id).pending_approvals()
    assert fresh.challenge_id != pending.challenge_id
    with pytest.raises(ControlError) as stale:
        await Thread(store, thread_id).approve(pending.challenge_id, ALICE)
    assert stale.value.code == "approval_duplicate"
    await Thread(store, thread_id).approve(fresh.challenge_id, ALICE)
    done = await bot.run(None, store=store, thread=thread_id, principal=ALICE)
    assert isinstance(done, Completed)
    assert len(sent) == 1
    await assert_export_is_valid(Thread(store, thread_id))
