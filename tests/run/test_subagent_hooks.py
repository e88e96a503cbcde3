"""The ``subagent_start`` and ``subagent_stop`` hooks (``threads.run.subagent_hooks``) on real
runs: start decisions go in the append that acts on them (``agent_spawned``, or the call's
``denied`` result with nothing spawned); the first non-allow decides; a hook that raises or
answers garbage is recorded ``failed`` and denies. A stop ``continue`` sends the child back
with the reason as its next input, exactly once; the cap turns a further ``continue`` into
``stop`` (``continuation limit``), a cancel into ``stop`` (``cancelled``); a failed stop hook
changes nothing. A rerun asks no hook again. Both engines."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import BaseModel

from threads import (
    Cancelled,
    Completed,
    Extension,
    HookDecision,
    Parked,
    Permissions,
    Principal,
    Tool,
    agent,
    open_thread,
    tool,
)
from threads.log.lines import Event
from threads.run.agent import Agent
from threads.run.hooks import SubagentStartView, SubagentStopView
from threads.run.subagent_hooks import MAX_CONTINUATIONS
from threads.store.protocol import Store
from threads.testing import Reply, call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")


class Note(BaseModel):
    text: str


applied: list[str] = []


async def write_note(args: Note, ctx: object) -> str:
    applied.append(args.text)
    return f"noted {args.text}"


NOTE: Tool[Note] = tool(name="write_note", description="Write a note.", input=Note,
                        execute=write_note, effect="idempotent", dedup_window_ms=60_000)


def of_type(events: list[Event], type_: str) -> list[Event]:
    return [e for e in events if e.type == type_]


def decisions(events: list[Event], hook: str) -> list[tuple[str, str, str | None]]:
    return [(e.data["extension"], e.data["decision"], e.data.get("reason"))
            for e in of_type(events, "hook_decision") if e.data["hook"] == hook]


def clerk(*replies: Reply, **kwargs: Any) -> Agent:
    return agent(name="clerk", model=scripted_model(list(replies)), tools=[NOTE], **kwargs)


def boss(child: Agent, extensions: list[Extension], *replies: Reply) -> Agent:
    return agent(name="boss", model=scripted_model(list(replies)), tools=[NOTE],
                 subagents=[child], extensions=extensions)


class Asked:
    """A hook answering from a list (the last answer repeats), counting the times it is asked
    and keeping the views it got."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.views: list[Any] = []

    async def __call__(self, view: Any) -> Any:
        self.views.append(view)
        answer = self.answers[min(len(self.views), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def starting(name: str, hook: Callable[[SubagentStartView], Awaitable[HookDecision]]) -> Extension:
    return Extension(name=name, subagent_start=hook)


def stopping(name: str, hook: Callable[[SubagentStopView], Awaitable[HookDecision]]) -> Extension:
    return Extension(name=name, subagent_stop=hook)


async def test_allowed_start_decisions_are_appended_with_the_spawn(store: Store) -> None:
    first, second = Asked(HookDecision()), Asked(HookDecision("allow", reason="fine"))
    parent = boss(clerk(say("hi")), [starting("a", first), starting("b", second)],
                  use(call("spawn_agent", agent="clerk", prompt="say hi")), say("done"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    events = await result.thread.timeline()
    assert decisions(events, "subagent_start") == [("a", "allow", None), ("b", "allow", "fine")]
    [spawned] = of_type(events, "agent_spawned")
    made = [e for e in events if e.seq in (spawned.seq - 2, spawned.seq - 1)]
    assert [e.type for e in made] == ["hook_decision", "hook_decision"]
    assert all(e.data["call_id"] == spawned.data["call_id"] for e in made)
    assert all(e.actor == {"kind": "host"} for e in made)
    [view] = first.views
    assert view == SubagentStartView(spawned.data["call_id"], "clerk", "say hi", False, "none")
    await parent.run(None, thread=result.thread.id, store=store, principal=ALICE)
    assert len(first.views) == 1  # a rerun reads the decision back, never asks again


@pytest.mark.parametrize(
    ("answer", "recorded", "words"),
    [
        (HookDecision("deny", reason="not today"), ("b", "deny", "not today"),
         "denied: not today"),
        (HookDecision("deny"), ("b", "deny", None), "denied"),
        (RuntimeError("boom"), ("b", "failed", "RuntimeError: boom"),
         "denied: hook_failed: b: RuntimeError: boom"),
        ("yes", ("b", "failed", "subagent_start answered 'yes', not one of ['allow', 'deny']"),
         "denied: hook_failed: b: subagent_start answered 'yes', not one of ['allow', 'deny']"),
        (HookDecision("continue", reason="x"), ("b", "failed",
         "subagent_start answered HookDecision(decision='continue', reason='x', spans=()),"
         " not one of ['allow', 'deny']"), None),
    ],
)
async def test_a_denied_or_failed_start_spawns_nothing(
    store: Store, answer: Any, recorded: tuple[str, str, str | None], words: str | None
) -> None:
    applied.clear()
    third = Asked(HookDecision())
    parent = boss(clerk(use(call("write_note", text="x")), say("never")),
                  [starting("a", Asked(HookDecision())), starting("b", Asked(answer)),
                   starting("c", third)],
                  use(call("spawn_agent", agent="clerk", prompt="x")), say("ok"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    events = await result.thread.timeline()
    assert decisions(events, "subagent_start") == [("a", "allow", None), recorded]
    assert third.views == []  # the first non-allow decided
    assert of_type(events, "agent_spawned") == []
    assert await result.thread.children() == ()
    assert applied == []
    [shown] = of_type(events, "tool_result")
    assert shown.data["origin"] == "denied"
    assert shown.data["is_error"]
    assert shown.actor == {"kind": "host"}
    assert shown.data["preview"] == (words or f"denied: hook_failed: b: {recorded[2]}")
    last_decision = of_type(events, "hook_decision")[-1]
    assert shown.seq == last_decision.seq + 1  # one append


async def test_continue_sends_the_child_back_with_the_reason_once(store: Store) -> None:
    applied.clear()
    hook = Asked(HookDecision("continue", reason="now write b too"), HookDecision("stop"))
    child = clerk(use(call("write_note", text="a")), say("wrote a"),
                  use(call("write_note", text="b")), say("wrote b"))
    parent = boss(child, [stopping("reviewer", hook)],
                  use(call("spawn_agent", agent="clerk", prompt="write a")), say("done"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert applied == ["a", "b"]
    events = await result.thread.timeline()
    assert decisions(events, "subagent_stop") == [
        ("reviewer", "continue", "now write b too"), ("reviewer", "stop", None)
    ]
    [spawned] = of_type(events, "agent_spawned")
    [finished] = of_type(events, "agent_finished")
    stop = of_type(events, "hook_decision")[-1]
    assert finished.seq == stop.seq + 1  # the last round is appended with the end
    shown = next(e for e in events if e.seq == finished.seq + 1)
    assert shown.data["preview"] == "wrote b"
    assert [(v.status, v.output, v.continuations) for v in hook.views] == [
        ("completed", "wrote a", 0), ("completed", "wrote b", 1)
    ]
    kid = await open_thread(store, spawned.data["child_thread_id"], principal=ALICE)
    inputs = [e for e in await kid.timeline() if e.type == "user_input"]
    assert [(e.data["source"], e.data["text"]) for e in inputs] == [
        ("parent_agent", "write a"), ("parent_agent", "now write b too")
    ]
    assert inputs[1].actor["principal"] == ALICE.to_wire()
    again = await parent.run(None, thread=result.thread.id, store=store, principal=ALICE)
    assert isinstance(again, Completed)
    assert len(hook.views) == 2
    assert applied == ["a", "b"]


async def test_past_the_cap_a_continue_is_recorded_as_stop(store: Store) -> None:
    hook = Asked(HookDecision("continue", reason="again"))
    replies = [say(f"answer {n}") for n in range(MAX_CONTINUATIONS + 1)]
    parent = boss(clerk(*replies), [stopping("nag", hook)],
                  use(call("spawn_agent", agent="clerk", prompt="go")), say("done"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    events = await result.thread.timeline()
    assert decisions(events, "subagent_stop") == [
        *[("nag", "continue", "again")] * MAX_CONTINUATIONS, ("nag", "stop", "continuation limit")
    ]
    [finished] = of_type(events, "agent_finished")
    shown = next(e for e in events if e.seq == finished.seq + 1)
    assert shown.data["preview"] == f"answer {MAX_CONTINUATIONS}"
    kid = await open_thread(store, finished.data["child_thread_id"], principal=ALICE)
    assert len(of_type(await kid.timeline(), "user_input")) == MAX_CONTINUATIONS + 1


async def test_a_cancelled_child_is_never_sent_back(store: Store) -> None:
    """The parent is cancelled while its child waits for an approval: the child ends
    cancelled, and the hook's ``continue`` is recorded ``stop`` (``cancelled``)."""
    hook = Asked(HookDecision("continue", reason="keep going"))
    child = clerk(use(call("write_note", text="x")), say("never"),
                  permissions=Permissions(ask=["write_note"]))
    parent = boss(child, [stopping("nag", hook)],
                  use(call("spawn_agent", agent="clerk", prompt="a")), say("never"))
    parked = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    await (await open_thread(store, parked.thread.id, principal=ALICE)).cancel(ALICE)
    ended = await parent.run(None, thread=parked.thread.id, store=store, principal=ALICE)
    assert isinstance(ended, Cancelled)
    events = await ended.thread.timeline()
    assert decisions(events, "subagent_stop") == [("nag", "stop", "cancelled")]
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "cancelled"
    kid = await open_thread(store, finished.data["child_thread_id"], principal=ALICE)
    assert len(of_type(await kid.timeline(), "user_input")) == 1


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (ValueError("bad"), "ValueError: bad"),
        (None, "subagent_stop answered None, not one of ['continue', 'stop']"),
        (HookDecision("continue"), "continue needs a reason: it is the child's next input"),
        (HookDecision("continue", reason="  "),
         "continue needs a reason: it is the child's next input"),
    ],
)
async def test_a_failed_stop_hook_changes_nothing(
    store: Store, answer: Any, reason: str
) -> None:
    after = Asked(HookDecision())
    parent = boss(clerk(say("wrote it")), [stopping("bad", Asked(answer)), stopping("ok", after)],
                  use(call("spawn_agent", agent="clerk", prompt="go")), say("done"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    events = await result.thread.timeline()
    assert decisions(events, "subagent_stop") == [("bad", "failed", reason), ("ok", "stop", None)]
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "completed"
    assert next(e for e in events if e.seq == finished.seq + 1).data["preview"] == "wrote it"


async def test_a_background_child_is_sent_back_before_its_late_result(store: Store) -> None:
    hook = Asked(HookDecision("continue", reason="and more"), HookDecision("stop"))
    child = clerk(say("first"), say("second"))
    parent = boss(child, [stopping("more", hook)],
                  use(call("spawn_agent", agent="clerk", prompt="go", background=True)),
                  say("waiting"), say("got it"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    events = await result.thread.timeline()
    assert decisions(events, "subagent_stop") == [("more", "continue", "and more"),
                                                  ("more", "stop", None)]
    [late] = of_type(events, "tool_result_late")
    assert late.data["preview"] == "second"
    [woken] = of_type(events, "woken")
    assert woken.data["causes"] == [late.event_id]
    stop = of_type(events, "hook_decision")[-1]
    assert [e.type for e in events if stop.seq <= e.seq <= woken.seq] == [
        "hook_decision", "agent_finished", "tool_result_late", "woken"
    ]


async def test_a_reason_not_yet_given_is_dropped_when_the_parent_is_cancelled(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process died after the ``continue`` was recorded, before the child got its reason;
    the parent is then cancelled: its next run gives the child nothing new, and the hook's next
    ``continue`` is recorded ``stop`` (``cancelled``)."""
    hook = Asked(HookDecision("continue", reason="one more"))
    parent = boss(clerk(say("first"), say("never")), [stopping("nag", hook)],
                  use(call("spawn_agent", agent="clerk", prompt="go")), say("never"))
    append = store.append

    async def dies_at_the_reason(branch_id: str, events: Any, **kwargs: Any) -> Any:
        if any(e.type == "user_input" and e.data.get("text") == "one more" for e in events):
            raise RuntimeError("the process died here")
        return await append(branch_id, events, **kwargs)

    monkeypatch.setattr(store, "append", dies_at_the_reason)
    with pytest.raises(RuntimeError):
        await parent.run("go", store=store, principal=ALICE)
    monkeypatch.setattr(store, "append", append)
    threads = [await open_thread(store, t.thread_id, principal=ALICE)
               for t in await store.list_threads(ALICE.tenant)]
    [thread] = [t for t in threads if await t.children()]
    await thread.cancel(ALICE)
    ended = await parent.run(None, thread=thread.id, store=store, principal=ALICE)
    assert isinstance(ended, Cancelled), ended
    events = await ended.thread.timeline()
    assert decisions(events, "subagent_stop") == [("nag", "continue", "one more"),
                                                  ("nag", "stop", "cancelled")]
    [kid] = await ended.thread.children()
    kid_thread = await open_thread(store, kid.thread_id, principal=ALICE)
    assert len(of_type(await kid_thread.timeline(), "user_input")) == 1
